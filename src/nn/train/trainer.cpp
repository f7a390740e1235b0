#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>

#include "core/text.hpp"
#include "flexkit/cuda.hpp"
#include "flexkit/data.hpp"
#include "flexkit/error.hpp"
#include "flexkit/expr.hpp"
#include "flexkit/train.hpp"
#include "nn/train/captured_step.hpp"
#include "nn/train/checkpoint.hpp"
#include "nn/train/data_parallel.hpp"
#include "nn/train/gradient_sync.hpp"
#include "nn/train/model_export.hpp"
#include "nn/train/progress.hpp"
#include "nn/train/step_log.hpp"

namespace flexkit::nn {

using flexkit::detail::cat;

namespace {

std::atomic<bool> g_stop{false};

Device resolve_device(const std::string& name) {
  if (name == "auto") return cuda::device_count() > 0 ? Device::cuda(0) : Device::cpu();
  const Device d = Device::parse(name);
  if (d.is_cuda()) {
    if (!cuda::built_with_cuda())
      throw DeviceError(cat("--device ", name, ": this flexkit was built without CUDA"));
    if (d.index >= cuda::device_count())
      throw DeviceError(
          cat("--device ", name, ": ", cuda::device_count(), " CUDA device(s) found"));
  }
  return d;
}

std::size_t peak_host_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::size_t>(usage.ru_maxrss) * 1024;
}

void prepare_directory(const std::string& dir, const char* option) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir))
    throw IoError(cat(option, ": cannot create the directory ", dir,
                      ec ? cat(": ", ec.message()) : std::string(" (a file is in the way)")));
  if (access(dir.c_str(), W_OK) != 0)
    throw IoError(cat(option, ": the directory ", dir, " is not writable: ", std::strerror(errno)));
}

}  // namespace

void request_stop() {
  g_stop = true;
}

std::string canonical_architecture(Sequential& net) {
  std::string out;
  for (std::size_t i = 0; i < net.size(); ++i) out += cat(i ? " " : "", net[i].describe());
  return out;
}

std::uint64_t model_hash(Sequential& net) {
  std::string key;
  for (std::size_t i = 0; i < net.size(); ++i) key += to_json(net[i].config(), 0) + "\n";
  return fnv1a(key.data(), key.size());
}

namespace {

std::vector<Rng*> layer_rngs(Sequential& net) {
  std::vector<Rng*> out;
  for (std::size_t i = 0; i < net.size(); ++i)
    if (auto* d = dynamic_cast<Dropout*>(&net[i])) out.push_back(&d->rng());
  return out;
}

struct Totals {
  double loss = 0;
  std::int64_t correct = 0, samples = 0;
};

// A label the network has no class for would match none and give a silently wrong loss.
void check_labels(const Batch& b, std::int64_t classes) {
  for (std::int32_t label : b.host_labels)
    if (label < 0 || label >= classes)
      throw ValueError(cat("the data has label ", label, ", but the network's output has ", classes,
                           " classes"));
}

// The classes of a network's output for Fashion-MNIST's images.
std::int64_t output_classes(const Sequential& net) {
  return net.check_shapes({1, 28, 28}).at(0);
}

// What a step log read sums to.
Totals totals_of(const StepLog::Reading& reading) {
  return {reading.loss_sum, std::llround(reading.correct), reading.samples};
}

// The test pass: the losses and counts stay on the device until the end.
Totals run_test(Sequential& net, BatchLoader& loader, LossKind loss, Device device) {
  const std::int64_t classes = output_classes(net);
  net.set_training(false);
  loader.start_epoch(0);
  StepLog log(device, loader.batches_per_epoch(), {});
  std::int64_t step = 0;
  while (std::optional<Batch> b = loader.next()) {
    check_labels(*b, classes);
    const Array out = net.forward(b->images);
    rate_loss_on_device(out, b->labels, loss, log.loss_slot(step), log.correct_slot(step));
    log.finish_step(step++, b->labels.dim(0), {});
  }
  const Totals t = totals_of(log.read());
  net.set_training(true);
  return t;
}

void restore(Sequential& net, Optimizer& optimizer, const Checkpoint& c, Device device,
             const std::string& path) {
  auto named = net.named_parameters();
  if (named.size() != c.parameters.size())
    throw FormatError(cat(path, ": the checkpoint holds ", c.parameters.size(),
                          " tensors, the model has ", named.size()));
  for (std::size_t i = 0; i < named.size(); ++i) {
    const auto& [name, array] = c.parameters[i];
    Parameter* p = named[i].second;
    if (name != named[i].first || array.shape() != p->value.shape())
      throw FormatError(cat(path, ": tensor ", i, " is ", name, " ", shape_str(array.shape()),
                            ", the model expects ", named[i].first, " ",
                            shape_str(p->value.shape())));
    p->value = array.copy_to(device);
  }
  std::vector<Array> state;
  for (const Array& a : c.optimizer_state) state.push_back(a.copy_to(device));
  optimizer.set_state(std::move(state), c.optimizer_steps);
  std::vector<Rng*> rngs = layer_rngs(net);
  if (rngs.size() != c.rng_states.size())
    throw FormatError(cat(path, ": the checkpoint's random states do not match the model"));
  for (std::size_t i = 0; i < rngs.size(); ++i) rngs[i]->set_state(c.rng_states[i]);
}

// Every managed flex16 tensor of the network and the optimizer's state.
std::vector<ManagedTensor> all_managed(Sequential& net, const Optimizer& optimizer) {
  std::vector<ManagedTensor> out = net.managed_tensors();
  const std::vector<Array> state = optimizer.state();
  for (std::size_t i = 0; i < state.size(); ++i)
    if (state[i].defined() && state[i].dtype() == DType::flex16)
      out.push_back({cat("optimizer.", i), TensorClass::optimizer_state, state[i].autoflex()});
  return out;
}

// What a flex16 run's checkpoint adds, once the network is in flex16 (set_precision): the
// published flex16 values of parameters with a master copy and every exponent manager's
// history, so that the run continues as the uninterrupted one would, bit for bit.
void restore_flex16(Sequential& net, Optimizer& optimizer, const Checkpoint& c, Device device,
                    const std::string& path) {
  const auto named = net.named_parameters();
  for (const auto& [name, value] : c.published) {
    auto it = std::find_if(named.begin(), named.end(),
                           [&](const auto& entry) { return entry.first == name; });
    if (it == named.end() || !it->second->master.defined() ||
        it->second->value.shape() != value.shape() || value.dtype() != DType::flex16)
      throw FormatError(
          cat(path, ": the checkpoint's flex16 value of ", name, " does not fit the model"));
    it->second->value = value.copy_to(device);
  }
  // The managers that exist (the optimizer's among them) by name; the network makes the rest.
  std::map<std::string, Autoflex> existing;
  for (const ManagedTensor& m : all_managed(net, optimizer)) existing.emplace(m.name, m.manager);
  for (const Checkpoint::Manager& m : c.managers) {
    try {
      auto it = existing.find(m.name);
      (it != existing.end() ? it->second : net.manager(m.name, m.tensor_class)).restore(m.state);
    } catch (const ValueError& e) {
      throw FormatError(cat(path, ": ", e.what()));
    }
  }
}

Checkpoint snapshot(Sequential& net, const Optimizer& optimizer, const ResolvedConfig& r,
                    std::uint64_t hash, std::int64_t epochs_done, std::int64_t step,
                    const std::vector<EpochRecord>& history, double best) {
  Checkpoint c;
  c.config_hash = hash;
  c.config_text = r.text();
  c.epochs_done = epochs_done;
  c.global_step = step;
  for (Rng* rng : layer_rngs(net)) c.rng_states.push_back(rng->state());
  // The f32 master copy where there is one: the flex16 value is its rounding.
  for (const auto& [name, p] : net.named_parameters())
    c.parameters.emplace_back(name,
                              (p->master.defined() ? p->master : p->value).copy_to(Device::cpu()));
  c.optimizer = optimizer.name();
  c.optimizer_steps = optimizer.steps();
  for (const Array& a : optimizer.state()) c.optimizer_state.push_back(a.copy_to(Device::cpu()));
  // flex16: the published values beside their master copies, and every exponent history.
  for (const auto& [name, p] : net.named_parameters())
    if (p->master.defined()) c.published.emplace_back(name, p->value.copy_to(Device::cpu()));
  for (const ManagedTensor& m : all_managed(net, optimizer))
    c.managers.push_back({m.name, m.tensor_class, m.manager.state()});
  c.history = history;
  c.best_test_accuracy = best;
  return c;
}

std::vector<PrecisionRecord> exponent_report(Sequential& net, const Optimizer& optimizer) {
  std::vector<PrecisionRecord> out;
  for (TensorClass c : {TensorClass::weights, TensorClass::activations, TensorClass::gradients,
                        TensorClass::optimizer_state}) {
    PrecisionRecord rec;
    rec.tensor_class = std::string(tensor_class_name(c));
    bool any = false;
    for (const ManagedTensor& m : all_managed(net, optimizer)) {
      if (m.tensor_class != c) continue;
      const AutoflexReport a = m.manager.report();
      ++rec.tensors;
      if (a.writes == 0) continue;
      rec.min_iwl = any ? std::min(rec.min_iwl, a.min_iwl) : a.min_iwl;
      rec.max_iwl = any ? std::max(rec.max_iwl, a.max_iwl) : a.max_iwl;
      any = true;
      rec.writes += a.writes;
      rec.overflow_writes += a.overflow_writes;
      rec.saturated += a.saturated;
      rec.nan_count += a.nan_count;
      rec.clamped += a.clamped;
    }
    out.push_back(rec);
  }
  return out;
}

// Data-parallel runs: the sums over the processes (a process's own totals, else).
Totals summed(const Totals& t, dist::Communicator* comm, const char* what) {
  if (!comm) return t;
  double loss = t.loss;
  std::int64_t counts[2] = {t.correct, t.samples};
  comm->all_reduce_sum(&loss, 1, what);
  comm->all_reduce_sum(counts, 2, what);
  return {loss, counts[0], counts[1]};
}

// Why this run's training steps cannot be captured as a CUDA graph; empty when they can.
std::string capture_obstacle(const TrainConfig& config, Sequential& net, const ResolvedConfig& r,
                             int world) {
  if (!config.cuda_graph) return "off (--cuda-graph off)";
  if (r.precision == "flex16")
    return "off: flex16 picks each write's exponent on the host from the write's statistics";
  if (world > 1) return "off: data-parallel steps sum their gradients through the host (MPI)";
  for (std::size_t i = 0; i < net.size(); ++i) {
    const std::string why = net[i].capture_obstacle();
    if (!why.empty()) return cat("off: layer ", i, ", ", why);
  }
  return {};
}

// The stream a captured run works on (the legacy default stream cannot be captured), current
// for the rest of the run, which it finishes before it goes.
struct RunStream {
  explicit RunStream(int device) : stream(device), guard(stream) {}
  ~RunStream() {
    try {
      stream.synchronize();
    } catch (...) {
    }
  }
  cuda::Stream stream;
  cuda::StreamGuard guard;
};

std::size_t device_peak(Device device) {
  if (!device.is_cuda()) return 0;
  return cuda::allocator_stats(device.index).peak_in_use_bytes;
}

}  // namespace

TrainResult train(const TrainConfig& config) {
  g_stop = false;
  const auto wall_start = std::chrono::steady_clock::now();
  std::optional<Checkpoint> resumed;
  if (!config.resume.empty()) resumed = load_checkpoint(config.resume);
  const ResolvedConfig r = resolve_config(config, resumed ? resumed->config_text : "");
  dist::Communicator* comm = config.communicator.get();
  const int world = comm ? comm->size() : 1, rank = comm ? comm->rank() : 0;
  Device device = resolve_device(config.device);
  // One GPU per process of a host, unless the device was named.
  if (comm && device.is_cuda() && (config.device == "cuda" || config.device == "auto"))
    device = Device::cuda(comm->local_rank() % cuda::device_count());
  Sequential net = r.build_model();
  net.set_input_gradient(false);  // the images' gradient is never used
  std::string graph_note;
  std::optional<RunStream> run_stream;
  if (device.is_cuda()) {
    graph_note = capture_obstacle(config, net, r, world);
    if (graph_note.empty() && cuda::current_stream(device.index) == nullptr)
      run_stream.emplace(device.index);
  }
  net.to(device);
  Rng init_rng(r.seed);
  net.reset_parameters(init_rng);
  const Precision precision = r.precision_settings();
  const std::uint64_t hash = model_hash(net);
  if (comm) check_same_configuration(*comm, cat(r.text(), "sync_bn=", config.sync_bn), hash);
  // flex16 over several processes: the gradients as exact integer sums (summed, then rounded
  // once), and every write's exponent agreed over the processes.
  const bool exact_sums = comm && world > 1 && r.precision == "flex16";
  if (exact_sums) leave_exact_gradient_sums(net);
  std::optional<ExponentAgreement> agreement;
  if (exact_sums) agreement.emplace(*comm);
  if (comm && config.sync_bn && world > 1)
    for (std::size_t i = 0; i < net.size(); ++i)
      if (auto* bn = dynamic_cast<BatchNorm*>(&net[i])) bn->synchronise(config.communicator);
  const LossKind loss_kind = parse_loss(r.loss);
  std::unique_ptr<Optimizer> optimizer = make_optimizer(r.optimizer, r.optimizer_options());
  Schedule schedule;
  schedule.kind = parse_schedule(r.schedule);
  schedule.step_size = r.step_size;
  schedule.gamma = r.gamma;
  schedule.total_epochs = r.epochs;

  TrainResult result;
  result.device = device.str();
  result.architecture = canonical_architecture(net);
  std::int64_t first_epoch = 0, global_step = 0;
  if (resumed) {
    // The checkpoint holds what its own precision keeps (master copies, exponent histories).
    std::map<std::string, std::string> saved = parse_config_lines(resumed->config_text);
    const std::string saved_precision = saved.count("precision") ? saved["precision"] : "f32";
    const std::string saved_master =
        saved.count("master_weights") ? saved["master_weights"] : r.master_weights;
    if (saved_precision != r.precision ||
        (r.precision == "flex16" && saved_master != r.master_weights))
      throw ValueError(
          cat(config.resume, ": the checkpoint was trained with --precision ", saved_precision,
              saved_precision == "flex16" ? cat(" --master-weights ", saved_master) : std::string(),
              "; resume it with the same settings"));
    if (r.precision == "flex16" && resumed->managers.empty())
      throw FormatError(cat(config.resume,
                            ": a flex16 checkpoint without exponent histories (written by an "
                            "older flexkit); its weights load with `flexkit eval`"));
    if (resumed->config_hash != hash)
      throw FormatError(cat(config.resume, ": the checkpoint was made for another model (",
                            parse_config_lines(resumed->config_text)["architecture"],
                            "); this run builds ", result.architecture));
    restore(net, *optimizer, *resumed, device, config.resume);
    first_epoch = resumed->epochs_done;
    global_step = resumed->global_step;
    result.history = resumed->history;
    result.best_test_accuracy = resumed->best_test_accuracy;
    if (!result.history.empty()) result.test_accuracy = result.history.back().test_accuracy;
    if (first_epoch > r.epochs)
      throw ValueError(
          cat(config.resume, " has ", first_epoch, " epochs done, more than --epochs ", r.epochs));
  }
  net.set_precision(precision);
  if (resumed && precision.dtype == DType::flex16)
    restore_flex16(net, *optimizer, *resumed, device, config.resume);
  if (comm && world > 1) broadcast_parameters(net, *comm, false);
  result.precision = r.precision;
  result.formats = precision_formats(precision);
  // Output places are made and checked before training, not found missing after it.
  if (!config.checkpoint_dir.empty()) prepare_directory(config.checkpoint_dir, "--checkpoint");
  for (const auto& [path, option] :
       {std::pair{config.save, "--save"}, {config.summary, "--summary"}})
    if (!path.empty()) {
      const std::filesystem::path parent = std::filesystem::path(path).parent_path();
      if (!parent.empty()) prepare_directory(parent.string(), option);
      if (std::filesystem::is_directory(path))
        throw ValueError(cat(option, " ", path, " is a directory; give a file name"));
    }

  const Dataset train_set = load_fashion_mnist(config.data_dir, true);
  const Dataset test_set = load_fashion_mnist(config.data_dir, false);
  LoaderOptions train_options;
  train_options.batch_size = r.batch;
  train_options.seed = r.seed;
  train_options.limit = r.limit;
  train_options.device = device;
  train_options.shard = rank;
  train_options.shards = world;
  LoaderOptions test_options = train_options;
  test_options.shuffle = false;
  BatchLoader train_loader(train_set, train_options);
  BatchLoader test_loader(test_set, test_options);
  if (world > 1) {  // every process needs a part of every batch
    for (const auto& [loader, what] :
         {std::pair{&train_loader, "training"}, std::pair{&test_loader, "test"}}) {
      const std::int64_t last = loader->samples() - (loader->batches_per_epoch() - 1) * r.batch;
      if (std::min(r.batch, last) < world)
        throw ValueError(cat("--distributed: ", world, " processes, but the ", what, " set's ",
                             last < r.batch ? "last batch holds " : "batches hold ",
                             std::min(r.batch, last),
                             " samples; every process needs at least "
                             "one sample of every batch (change --batch or --limit)"));
    }
  }
  std::optional<GradientSync> gradient_sync;
  if (comm && world > 1) gradient_sync.emplace(*comm, net);

  Progress progress(stdout, !config.quiet && rank == 0);
  progress.line(cat("flexkit train: ", r.model == r.architecture ? "" : r.model + " = ",
                    result.architecture, "\n  neuron ", r.neuron, ", T ", r.time_steps, ", ",
                    r.optimizer, " lr ", r.lr, " (", r.schedule, "), loss ", r.loss, ", batch ",
                    r.batch, ", ", train_loader.samples(), " training samples, device ",
                    device.str(), ", seed ", r.seed,
                    world > 1 ? cat("\n  data parallel: ", world,
                                    " processes, each with its part of every batch, gradients "
                                    "summed over them (MPI); BatchNorm statistics ",
                                    config.sync_bn ? "over all of them" : "per process")
                              : std::string()));
  if (precision.dtype == DType::flex16) {
    std::string formats;
    for (const auto& [what, format] : result.formats) formats += cat("\n  ", what, ": ", format);
    progress.line(
        cat("precision flex16 (", r.rounding, " rounding in the optimizer's writes):", formats));
  }
  if (resumed) progress.line(cat("resuming from ", config.resume, " after epoch ", first_epoch));

  double train_seconds = 0;
  std::int64_t trained_samples = 0, local_samples = 0;
  std::string last_checkpoint = resumed ? config.resume : "";
  const auto params = net.parameters();
  std::vector<std::string> trainable_names;
  for (const auto& [name, p] : net.named_parameters())
    if (p->trainable) trainable_names.push_back(name);
  StepLog step_log(device, train_loader.batches_per_epoch(), trainable_names);
  const std::int64_t classes = output_classes(net);
  std::optional<CapturedStep> captured;
  if (device.is_cuda() && graph_note.empty())
    captured.emplace(net, *optimizer, params, loss_kind, step_log, device);
  if (device.is_cuda())
    progress.line(graph_note.empty()
                      ? std::string("CUDA graph: each step of a full batch is replayed from one "
                                    "captured graph")
                      : cat("CUDA graph: ", graph_note));
  bool graph_failure_shown = false;
  for (std::int64_t epoch = first_epoch; epoch < r.epochs; ++epoch) {
    if (g_stop) {
      result.interrupted = true;
      progress.line(cat("interrupted before epoch ", epoch + 1,
                        last_checkpoint.empty()
                            ? std::string("; no checkpoint was written")
                            : cat("; the last checkpoint, ", last_checkpoint, ", is intact")));
      break;
    }
    const double lr = schedule.lr(r.lr, epoch);
    const auto epoch_start = std::chrono::steady_clock::now();
    net.set_training(true);
    train_loader.start_epoch(epoch);
    progress.start_epoch(epoch + 1, r.epochs, train_loader.batches_per_epoch());
    std::int64_t step_in_epoch = 0;
    const std::int64_t epoch_first_step = global_step;  // global steps are 1-based
    step_log.clear();
    auto last_check = std::chrono::steady_clock::now();
    // Reads what the device recorded so far and stops the run at the first step that went
    // wrong (a non-finite loss or parameter, a NaN stored in a flex16 tensor).
    auto check = [&]() -> const StepLog::Reading& {
      last_check = std::chrono::steady_clock::now();
      const StepLog::Reading& reading = step_log.read();
      std::optional<std::int64_t> nan_step;  // 0-based in the epoch
      std::string nan_tensor;
      if (precision.dtype == DType::flex16)
        for (const ManagedTensor& m : all_managed(net, *optimizer)) {
          const AutoflexReport report = m.manager.report();
          if (report.nan_count == 0) continue;
          // Before this epoch's first step (or unlabelled): the last epoch's test pass.
          const std::int64_t s =
              std::max<std::int64_t>(-1, report.first_nan_label - epoch_first_step - 1);
          if (!nan_step || s < *nan_step) {
            nan_step = s;
            nan_tensor = cat(m.name, " (", tensor_class_name(m.tensor_class), ")");
          }
        }
      const auto when = [&](std::int64_t s) {
        if (s < 0) return cat("the test pass after epoch ", epoch);
        return cat("epoch ", epoch + 1, ", step ", s + 1, " (global step ",
                   epoch_first_step + s + 1, ")");
      };
      const std::string last_good = last_checkpoint.empty()
                                        ? std::string(", no checkpoint was written")
                                        : cat("; the last good checkpoint is ", last_checkpoint);
      const std::int64_t never = std::numeric_limits<std::int64_t>::max();
      const std::int64_t loss_at = reading.bad_loss_step.value_or(never);
      const std::int64_t parameter_at = reading.bad_parameter_step.value_or(never);
      const std::int64_t nan_at = nan_step.value_or(never);
      const std::int64_t first = std::min({loss_at, parameter_at, nan_at});
      if (first == never) return reading;
      progress.finish_bar();
      if (first == loss_at)
        throw TrainingDiverged(cat("the loss is not finite at ", when(first), "; stopped",
                                   last_good, ". Try a lower learning rate (--lr)"));
      // Spikes hide a NaN (a NaN potential never fires), so the parameters are checked too.
      if (first == parameter_at)
        throw TrainingDiverged(cat("parameter ", reading.bad_parameter,
                                   " is no longer finite after ", when(first), "; stopped",
                                   last_good, ". Try a lower learning rate (--lr)"));
      // A NaN reaching a flex16 write is stored as 0 and counted; it would only spread.
      throw TrainingDiverged(cat("a NaN reached the flex16 tensor ", nan_tensor, " at ",
                                 when(first), "; stopped", last_good,
                                 ". Try a lower learning rate (--lr)"));
    };
    while (std::optional<Batch> b = train_loader.next()) {
      check_labels(*b, classes);
      const AutoflexWriteLabel label(global_step + 1);
      if (world > 1)  // dropout draws its masks for the global batch and takes this shard's
        for (std::size_t i = 0; i < net.size(); ++i)
          if (auto* d = dynamic_cast<Dropout*>(&net[i]))
            d->set_shard(b->global_offset, b->global_size);
      if (captured) {
        captured->run(b->images, b->labels, lr, step_in_epoch);
        if (!captured->unavailable().empty() && !graph_failure_shown) {
          progress.finish_bar();
          progress.line(cat("CUDA graph: the capture failed, steps run uncaptured from here: ",
                            captured->unavailable()));
          graph_failure_shown = true;
        }
      } else {
        {
          // flex16 over several processes: what the step writes from its shard takes the
          // exponent of the whole batch's tensor.
          std::optional<ShardedWrites> sharded;
          if (agreement) sharded.emplace(*agreement);
          const Array out = net.forward(b->images);
          // Data parallel: the loss gradient is that of the global batch's mean (each shard's
          // part of it, so that a synchronised BatchNorm mixes like-scaled gradients), and the
          // parameters' gradients are summed over the processes during and after the backward.
          const DeviceLossResult loss = rate_loss_on_device(
              out, b->labels, loss_kind, step_log.loss_slot(step_in_epoch),
              step_log.correct_slot(step_in_epoch), gradient_sync ? b->global_size : 0);
          net.zero_grad();
          if (gradient_sync)
            net.backward(loss.grad_output,
                         [&](std::size_t layer) { gradient_sync->layer_done(layer); });
          else
            net.backward(loss.grad_output);
        }
        if (gradient_sync) gradient_sync->finish();
        optimizer->step(params, lr);
        step_log.finish_step(step_in_epoch, b->labels.dim(0), params);
      }
      ++step_in_epoch;
      ++global_step;
      if (config.on_step) config.on_step(global_step);
      // The host reads the device's record only to report, and at least every second so that a
      // diverging run stops soon.
      if (progress.due(step_in_epoch) ||
          std::chrono::steady_clock::now() - last_check > std::chrono::seconds(1)) {
        const StepLog::Reading& t = check();
        // Rank 0's running loss and accuracy; the rate counts every process's samples (shards
        // differ by one sample at most).
        progress.step(step_in_epoch,
                      t.loss_sum / static_cast<double>(std::max<std::int64_t>(1, t.samples)),
                      t.correct / static_cast<double>(std::max<std::int64_t>(1, t.samples)),
                      t.samples * world);
      }
      if (comm && world > 1) {  // a stop (Ctrl-C reaches every process) at the same step
        std::int64_t stop = g_stop ? 1 : 0;
        comm->all_reduce_sum(&stop, 1, "the stop flag");
        if (stop) g_stop = true;
      }
      if (g_stop) break;
    }
    const Totals local = totals_of(check());
    const Totals t = summed(local, comm, "the epoch's totals");
    const double epoch_train_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start).count();
    if (g_stop) {
      progress.finish_bar();
      result.interrupted = true;
      progress.line(cat("interrupted in epoch ", epoch + 1, " at step ", step_in_epoch,
                        last_checkpoint.empty()
                            ? std::string("; no checkpoint was written")
                            : cat("; the last checkpoint, ", last_checkpoint, ", is intact")));
      break;
    }
    train_seconds += epoch_train_seconds;
    trained_samples += t.samples;
    local_samples += local.samples;
    // Each process's BatchNorm estimates saw its own shards; all evaluate (and rank 0 saves)
    // rank 0's, as PyTorch's DDP broadcasts its buffers.
    if (comm && world > 1) broadcast_parameters(net, *comm, true);
    std::optional<ShardedWrites> sharded;  // the test pass's writes update exponent histories
    if (agreement) sharded.emplace(*agreement);
    const Totals test =
        summed(run_test(net, test_loader, loss_kind, device), comm, "the test totals");
    sharded.reset();
    EpochRecord record;
    record.epoch = epoch + 1;
    record.train_loss = t.loss / static_cast<double>(std::max<std::int64_t>(1, t.samples));
    record.train_accuracy =
        static_cast<double>(t.correct) / static_cast<double>(std::max<std::int64_t>(1, t.samples));
    record.test_loss = test.loss / static_cast<double>(std::max<std::int64_t>(1, test.samples));
    record.test_accuracy = static_cast<double>(test.correct) /
                           static_cast<double>(std::max<std::int64_t>(1, test.samples));
    record.lr = lr;
    record.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start).count();
    result.history.push_back(record);
    result.test_accuracy = record.test_accuracy;
    const bool best =
        record.test_accuracy > result.best_test_accuracy || result.history.size() == 1;
    if (best) result.best_test_accuracy = record.test_accuracy;
    progress.line(cat(
        "epoch ", record.epoch, "/", r.epochs, ": train loss ", format_fixed(record.train_loss, 4),
        " acc ", format_fixed(100 * record.train_accuracy, 2), "% | test loss ",
        format_fixed(record.test_loss, 4), " acc ", format_fixed(100 * record.test_accuracy, 2),
        "% | lr ", format_general(lr), " | ", format_fixed(record.seconds, 1), " s, ",
        format_fixed(static_cast<double>(t.samples) / epoch_train_seconds, 0), " samples/s"));
    if (!config.checkpoint_dir.empty() && rank == 0) {
      const Checkpoint c = snapshot(net, *optimizer, r, hash, epoch + 1, global_step,
                                    result.history, result.best_test_accuracy);
      const std::string path =
          (std::filesystem::path(config.checkpoint_dir) / cat("epoch-", epoch + 1, ".ckpt"))
              .string();
      save_checkpoint(path, c);
      last_checkpoint = path;
      if (best)
        save_checkpoint((std::filesystem::path(config.checkpoint_dir) / "best.ckpt").string(), c);
    }
  }
  result.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  result.samples_per_second =
      train_seconds > 0 ? static_cast<double>(trained_samples) / train_seconds : 0;
  if (comm && world > 1) {
    const double mine = train_seconds > 0 ? static_cast<double>(local_samples) / train_seconds : 0;
    result.rank_samples_per_second.resize(static_cast<std::size_t>(world));
    comm->all_gather(&mine, result.rank_samples_per_second.data(), sizeof mine,
                     "the throughput report");
  }
  if (precision.dtype == DType::flex16) {
    result.exponents = exponent_report(net, *optimizer);
    for (const PrecisionRecord& e : result.exponents)
      progress.line(cat("flex16 ", e.tensor_class, ": ", e.tensors, " tensors, iwl ", e.min_iwl,
                        "..", e.max_iwl, ", ", e.overflow_writes, " of ", e.writes,
                        " writes saturated (", e.saturated, " values)",
                        e.nan_count ? cat(", ", e.nan_count, " NaN stored as 0") : std::string(),
                        e.clamped ? cat(", ", e.clamped, " exponents clamped") : std::string()));
  }
  if (device.is_cuda()) {
    result.cuda_graph.note = captured ? captured->unavailable() : graph_note;
    if (captured) {
      result.cuda_graph.captures = captured->captures();
      result.cuda_graph.replays = captured->replays();
      result.cuda_graph.uncaptured_steps = captured->uncaptured();
      result.cuda_graph.nodes = captured->nodes();
      result.cuda_graph.used = captured->replays() > 0;
      captured.reset();
    }
  }
  result.peak_host_bytes = peak_host_bytes();
  result.peak_device_bytes = device_peak(device);
  if (!config.save.empty() && !result.interrupted && rank == 0) save_model_npz(config.save, net, r);
  if (!config.summary.empty() && rank == 0) write_summary(config.summary, result, r);
  if (!result.history.empty())
    progress.line(cat("test accuracy ", format_fixed(100 * result.test_accuracy, 2), "% (best ",
                      format_fixed(100 * result.best_test_accuracy, 2), "%), ",
                      format_fixed(result.samples_per_second, 0), " samples/s, ",
                      format_duration(result.wall_seconds), " in all"));
  return result;
}

EvalResult evaluate_checkpoint(const std::string& checkpoint, const std::string& device_name,
                               const std::string& data_dir, std::int64_t limit) {
  const Checkpoint c = load_checkpoint(checkpoint);
  TrainConfig config;
  const ResolvedConfig r = resolve_config(config, c.config_text);
  const Device device = resolve_device(device_name);
  Sequential net = r.build_model();
  net.to(device);
  if (model_hash(net) != c.config_hash)
    throw FormatError(cat(checkpoint, ": the checkpoint's hash does not match its own model"));
  std::unique_ptr<Optimizer> optimizer = make_optimizer(r.optimizer, r.optimizer_options());
  restore(net, *optimizer, c, device, checkpoint);
  net.set_precision(r.precision_settings());  // evaluated as it was trained
  if (r.precision == "flex16" && !c.managers.empty())
    restore_flex16(net, *optimizer, c, device, checkpoint);
  const Dataset test_set = load_fashion_mnist(data_dir, false);
  LoaderOptions options;
  options.batch_size = r.batch;
  options.shuffle = false;
  options.limit = limit;
  options.device = device;
  BatchLoader loader(test_set, options);
  const Totals t = run_test(net, loader, parse_loss(r.loss), device);
  EvalResult e;
  e.samples = t.samples;
  e.test_loss = t.loss / static_cast<double>(std::max<std::int64_t>(1, t.samples));
  e.test_accuracy =
      static_cast<double>(t.correct) / static_cast<double>(std::max<std::int64_t>(1, t.samples));
  e.architecture = canonical_architecture(net);
  e.device = device.str();
  return e;
}

}  // namespace flexkit::nn
