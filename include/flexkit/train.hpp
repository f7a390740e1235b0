// The trainer behind `flexkit train` and `flexkit eval`: a spiking classifier on Fashion-MNIST,
// end to end on flexkit's kernels, with progress, checkpoints that resume bit for bit, the
// trained weights as .npz and a JSON summary.
//
//   nn::TrainConfig config;            // the defaults are the `mlp` preset on the CPU
//   config.epochs = 2;
//   nn::TrainResult result = nn::train(config);
//   std::printf("%.4f\n", result.test_accuracy);
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "flexkit/distributed.hpp"
#include "flexkit/nn.hpp"

namespace flexkit::nn {

// Every option of `flexkit train`. Unset optionals take the preset's value (see presets()), or,
// when resuming, the checkpoint's.
struct TrainConfig {
  std::optional<std::string> model;   // a preset name or an architecture string; "mlp" if unset
  std::optional<std::string> neuron;  // what `sn` layers run: a built-in name or a neuron file
  std::vector<std::pair<std::string, std::string>> neuron_settings;  // --set k=v
  std::optional<std::int64_t> time_steps, epochs, batch;
  std::optional<double> lr, momentum, weight_decay;
  std::optional<bool> nesterov;
  std::optional<std::string> optimizer, loss, schedule;
  std::optional<std::int64_t> step_size;      // the step schedule: every step_size epochs (30)
  std::optional<double> gamma;                // ... the rate is multiplied by gamma (0.1)
  std::optional<std::uint64_t> seed;          // 0 if unset
  std::optional<std::int64_t> limit;          // the first `limit` samples of each set; 0: all
  std::optional<std::string> precision;       // f32 | flex16 (f32 if unset)
  std::optional<std::string> master_weights;  // flex16: f32 (an f32 master copy) | flex16
  std::optional<std::string> rounding;  // flex16: nearest | stochastic (the optimizer's writes)
  std::string device = "auto";          // cpu | cuda | cuda:N | auto
  std::string data_dir;                 // empty: FLEXKIT_DATA_DIR, else Debian's directory
  std::string checkpoint_dir;           // one checkpoint per epoch (epoch-N.ckpt) and best.ckpt
  std::string resume;                   // a checkpoint to continue from
  std::string save;                     // the trained weights as .npz
  std::string summary;                  // the JSON summary
  bool quiet = false;                   // no progress output
  // Data-parallel training: this process is one of communicator->size() that train the same
  // model on their shards of each global batch (--batch samples in all) and sum the gradients
  // before each step, so that every process keeps the same weights. Rank 0 prints, writes the
  // checkpoints, the weights and the summary. Null: one process.
  std::shared_ptr<dist::Communicator> communicator;
  // With a communicator: BatchNorm's statistics over every process's shard together (as one
  // process over the global batch), instead of each process's own.
  bool sync_bn = false;
  // Called after each training step, once its work is queued (the global step, 1-based): for
  // logging and profiling around the steps.
  std::function<void(std::int64_t)> on_step;
  // CUDA: capture the training step as a CUDA graph and replay it for every batch of the
  // captured shape, where the run allows it (f32, one process, no layer with host work per
  // step such as dropout). The results are the same bit for bit either way.
  bool cuda_graph = true;
};

// A preset: the architecture and the hyper-parameters it trains with.
struct Preset {
  std::string name, description, architecture, neuron;
  std::vector<std::pair<std::string, std::string>> neuron_settings;
  std::int64_t time_steps, epochs, batch;
  double lr, momentum, weight_decay;
  bool nesterov;
  std::string optimizer, loss, schedule;
};
const std::vector<Preset>& presets();

struct EpochRecord {
  std::int64_t epoch = 0;  // 1-based
  double train_loss = 0, train_accuracy = 0, test_loss = 0, test_accuracy = 0, lr = 0;
  double seconds = 0;
};

// What the exponent managers of one class of flex16 tensors saw over a run.
struct PrecisionRecord {
  std::string tensor_class;  // weights, activations, gradients, optimizer state
  std::int64_t tensors = 0, writes = 0;
  int min_iwl = 0, max_iwl = 0;
  std::int64_t overflow_writes = 0;  // writes that saturated at least one value
  std::uint64_t saturated = 0, nan_count = 0;
  std::int64_t clamped = 0;  // exponent predictions clamped to the legal range
};

struct TrainResult {
  std::vector<EpochRecord> history;
  std::string precision = "f32";
  std::vector<std::pair<std::string, std::string>> formats;  // tensor class -> format
  std::vector<PrecisionRecord> exponents;                    // flex16 runs, per class
  double test_accuracy = 0, best_test_accuracy = 0;
  double wall_seconds = 0, samples_per_second = 0;
  std::size_t peak_host_bytes = 0, peak_device_bytes = 0;
  std::string device, architecture;
  bool interrupted = false;
  // Data-parallel runs: every process's training samples per second, in rank order.
  std::vector<double> rank_samples_per_second;
  // CUDA runs: how the training steps ran (TrainConfig::cuda_graph).
  struct GraphReport {
    bool used = false;  // some steps were replayed
    std::string note;   // why steps were not (or no longer) captured; empty otherwise
    std::int64_t captures = 0, replays = 0, uncaptured_steps = 0;
    std::size_t nodes = 0;  // the last captured graph's kernels, copies and memsets
  } cuda_graph;
};

// Trains as configured (resuming when config.resume is set). Throws ValueError for impossible
// options, IoError / FormatError for missing data or bad checkpoints, and TrainingDiverged when
// the loss stops being finite.
TrainResult train(const TrainConfig& config);

struct EvalResult {
  double test_loss = 0, test_accuracy = 0;
  std::int64_t samples = 0;
  std::string architecture, device;
};
// The test-set accuracy of a checkpoint's weights (its own architecture and settings).
EvalResult evaluate_checkpoint(const std::string& checkpoint, const std::string& device = "auto",
                               const std::string& data_dir = "", std::int64_t limit = 0);

class TrainingDiverged : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Set from a signal handler: the trainer stops after the current step, leaving its
// checkpoints as they are.
void request_stop();

}  // namespace flexkit::nn
