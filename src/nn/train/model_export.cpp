#include "nn/train/model_export.hpp"

#include <algorithm>
#include <cstdio>

#include "core/text.hpp"
#include "flexkit/conv.hpp"
#include "flexkit/data.hpp"
#include "flexkit/version.hpp"

namespace flexkit::nn {

using flexkit::detail::cat;

std::string format_fixed(double v, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", digits, v);
  return buffer;
}

std::string format_general(double v) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.6g", v);
  return buffer;
}

namespace {

// PyTorch's layout for a saved tensor: convolution weights go back to (K, C, R, S).
Array exported(Layer& layer, const Parameter& p) {
  if (dynamic_cast<Conv2d*>(&layer) && p.name == "weight") return from_conv_layout(p.value);
  return p.value;
}

}  // namespace

std::string model_json(Sequential& net, const ResolvedConfig& config) {
  JsonValue layers = JsonValue::array();
  JsonValue tensors = JsonValue::object();
  for (std::size_t i = 0; i < net.size(); ++i) {
    JsonValue layer = net[i].config();
    layer.set("index", static_cast<std::int64_t>(i));
    layer.set("spelling", net[i].describe());
    layers.push_back(layer);
    for (Parameter* p : net[i].parameters()) {
      JsonValue shape = JsonValue::array();
      const Array saved = exported(net[i], *p);
      for (std::int64_t d : saved.shape()) shape.push_back(d);
      tensors.set(cat(i, ".", p->name),
                  JsonValue::object({{"shape", shape}, {"trainable", p->trainable}}));
    }
  }
  LoaderOptions defaults;
  JsonValue input = JsonValue::object(
      {{"dataset", "Fashion-MNIST"},
       {"shape", JsonValue::array({1, 28, 28})},
       {"normalisation", "x = (pixel / 255 - mean) / std"},
       {"mean", static_cast<double>(defaults.mean)},
       {"std", static_cast<double>(defaults.std)},
       {"encoding",
        "direct: the normalised image is the input current at every one of the T time steps"},
       {"layout",
        "flexkit runs (C, H, W, T, N), batch innermost; in PyTorch terms every layer is applied "
        "to each time step, state carried over the T steps and reset for every batch"}});
  JsonValue readout = JsonValue::object(
      {{"output", "the spikes of the last layer, (T, N, 10) in PyTorch terms"},
       {"rate", "mean over the T steps"},
       {"prediction", "argmax of the rate (ties: the lowest class)"},
       {"loss", config.loss == "mse" ? "mean squared error of the rate against one-hot labels"
                                     : "softmax cross-entropy of the rate"}});
  return to_json(JsonValue::object({{"format", "flexkit-model"},
                                    {"format_version", 1},
                                    {"flexkit_version", std::string(kVersion)},
                                    {"architecture", canonical_architecture(net)},
                                    {"time_steps", config.time_steps},
                                    {"input", input},
                                    {"readout", readout},
                                    {"layers", layers},
                                    {"tensors", tensors}}));
}

void save_model_npz(const std::string& path, Sequential& net, const ResolvedConfig& config) {
  std::vector<std::pair<std::string, Array>> arrays;
  for (std::size_t i = 0; i < net.size(); ++i)
    for (Parameter* p : net[i].parameters())
      arrays.emplace_back(cat(i, ".", p->name), exported(net[i], *p));
  save_npz(path, arrays, {{"model", model_json(net, config)}});
}

void write_summary(const std::string& path, const TrainResult& result,
                   const ResolvedConfig& config) {
  JsonValue history = JsonValue::array();
  for (const EpochRecord& e : result.history)
    history.push_back(JsonValue::object({{"epoch", e.epoch},
                                         {"train_loss", e.train_loss},
                                         {"train_accuracy", e.train_accuracy},
                                         {"test_loss", e.test_loss},
                                         {"test_accuracy", e.test_accuracy},
                                         {"lr", e.lr},
                                         {"seconds", e.seconds}}));
  JsonValue peak = JsonValue::object({{"host", static_cast<std::int64_t>(result.peak_host_bytes)}});
  if (result.device.rfind("cuda", 0) == 0)
    peak.set("device", static_cast<std::int64_t>(result.peak_device_bytes));
  JsonValue settings = JsonValue::object();
  for (const auto& [k, v] : config.neuron_settings) settings.set(k, v);
  JsonValue formats = JsonValue::object();
  for (const auto& [what, format] : result.formats) formats.set(what, format);
  JsonValue exponents = JsonValue::object();
  for (const PrecisionRecord& e : result.exponents)
    exponents.set(e.tensor_class,
                  JsonValue::object({{"tensors", e.tensors},
                                     {"writes", e.writes},
                                     {"min_iwl", static_cast<std::int64_t>(e.min_iwl)},
                                     {"max_iwl", static_cast<std::int64_t>(e.max_iwl)},
                                     {"overflow_writes", e.overflow_writes},
                                     {"saturated_values", static_cast<std::int64_t>(e.saturated)},
                                     {"nan_values", static_cast<std::int64_t>(e.nan_count)},
                                     {"clamped_exponents", e.clamped}}));
  JsonValue graph;  // CUDA runs: how the steps ran
  if (result.device.rfind("cuda", 0) == 0)
    graph = JsonValue::object({{"used", result.cuda_graph.used},
                               {"note", result.cuda_graph.note},
                               {"captures", result.cuda_graph.captures},
                               {"replays", result.cuda_graph.replays},
                               {"uncaptured_steps", result.cuda_graph.uncaptured_steps},
                               {"nodes", static_cast<std::int64_t>(result.cuda_graph.nodes)}});
  JsonValue ranks = JsonValue::array();  // data-parallel runs: each process's throughput
  for (double s : result.rank_samples_per_second) ranks.push_back(s);
  JsonValue summary = JsonValue::object(
      {{"test_accuracy", result.test_accuracy},
       {"best_test_accuracy", result.best_test_accuracy},
       {"epochs", static_cast<std::int64_t>(result.history.size())},
       {"epochs_planned", config.epochs},
       {"interrupted", result.interrupted},
       {"history", history},
       {"wall_seconds", result.wall_seconds},
       {"samples_per_second", result.samples_per_second},
       {"processes", std::max<std::int64_t>(
                         1, static_cast<std::int64_t>(result.rank_samples_per_second.size()))},
       {"rank_samples_per_second", ranks},
       {"peak_memory_bytes", peak},
       {"cuda_graph", graph},
       {"device", result.device},
       {"precision", result.precision},
       {"master_weights",
        result.precision == "flex16" ? JsonValue(config.master_weights) : JsonValue()},
       {"rounding", result.precision == "flex16" ? JsonValue(config.rounding) : JsonValue()},
       {"formats", formats},
       {"exponents", exponents},
       {"seed", static_cast<std::int64_t>(config.seed)},
       {"model", result.architecture},
       {"preset", config.model == config.architecture ? JsonValue() : JsonValue(config.model)},
       {"neuron", config.neuron},
       {"neuron_settings", settings},
       {"time_steps", config.time_steps},
       {"batch", config.batch},
       {"lr", config.lr},
       {"optimizer", config.optimizer},
       {"loss", config.loss},
       {"schedule", config.schedule},
       {"limit", config.limit},
       {"flexkit_version", std::string(kVersion)}});
  write_text_file_atomically(path, to_json(summary) + "\n");
}

}  // namespace flexkit::nn
