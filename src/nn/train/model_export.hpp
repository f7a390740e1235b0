// What a training run is configured with (presets and options resolved), and what it writes
// besides checkpoints: the weights as .npz with a model description, and the JSON summary.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "flexkit/nn.hpp"
#include "flexkit/train.hpp"

namespace flexkit::nn {

struct ResolvedConfig {
  std::string model, architecture, neuron;
  std::vector<std::pair<std::string, std::string>> neuron_settings;
  std::int64_t time_steps = 0, epochs = 0, batch = 0, step_size = 30, limit = 0;
  double lr = 0, momentum = 0, weight_decay = 0, gamma = 0.1;
  bool nesterov = false;
  std::string optimizer, loss, schedule;
  std::uint64_t seed = 0;
  std::string precision = "f32", master_weights = "f32", rounding = "nearest";

  Precision precision_settings() const;

  OptimizerOptions optimizer_options() const;
  Neuron build_neuron() const;
  Sequential build_model() const;  // checks that the shapes chain and the output is 10 classes
  std::string text() const;        // `key=value` lines, as checkpoints store them
};

// Options over the preset, or over `checkpoint_text` (a checkpoint's text()) where it is given.
ResolvedConfig resolve_config(const TrainConfig& config, const std::string& checkpoint_text);
std::string canonical_architecture(Sequential& net);
std::uint64_t model_hash(Sequential& net);

// Every parameter and buffer as "<layer>.<name>" (convolution weights in PyTorch's (K, C, R, S)),
// plus "model": a JSON text describing the network completely.
void save_model_npz(const std::string& path, Sequential& net, const ResolvedConfig& config);
std::string model_json(Sequential& net, const ResolvedConfig& config);
void write_summary(const std::string& path, const TrainResult& result,
                   const ResolvedConfig& config);

std::string format_fixed(double v, int digits);
std::string format_general(double v);  // %.6g

}  // namespace flexkit::nn
