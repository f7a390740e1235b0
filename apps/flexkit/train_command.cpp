// `flexkit train` and `flexkit eval`: the trainer from the command line (CLI11 parses the
// options; every option has --help text).
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>

#include "cli_parse.hpp"
#include "commands.hpp"
#include "flexkit/error.hpp"
#include "flexkit/train.hpp"
#if FLEXKIT_HAVE_MPI
#include "flexkit/distributed_mpi.hpp"
#endif

namespace flexkit::cli {

namespace {

std::string preset_help() {
  std::string out = "a preset or an architecture string. Presets:";
  for (const nn::Preset& p : nn::presets()) out += "\n  " + p.name + ": " + p.description;
  out +=
      "\nArchitecture strings: layers separated by spaces, e.g. \"flatten linear(256) sn "
      "linear(10) sn\"; layers linear(OUT[,bias=]), conv(OUT,KERNEL[,stride=][,padding=][,bias=]), "
      "maxpool(K), avgpool(K), bn, flatten, dropout(P), sn (the --neuron), a built-in neuron "
      "name, neuron(FILE)";
  return out;
}

extern "C" void on_interrupt(int) {
  nn::request_stop();
}

}  // namespace

int train_command(const Args& args) {
  CLI::App app{"Train a spiking classifier on Fashion-MNIST with flexkit's kernels.",
               "flexkit train"};
  // An option given twice takes its last value, as most command lines do.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  nn::TrainConfig c;
  std::string model, neuron, optimizer, loss, schedule, precision, master_weights, rounding;
  std::vector<std::string> settings;
  std::int64_t T = 0, epochs = 0, batch = 0, limit = 0, step_size = 0;
  double lr = 0, momentum = 0, weight_decay = 0, gamma = 0;
  std::uint64_t seed = 0;
  bool nesterov = false;
  auto* o_model = app.add_option("--model", model, preset_help())->default_str("mlp");
  auto* o_neuron = app.add_option("--neuron", neuron,
                                  "the neuron of `sn` layers: a built-in (if, lif, plif, alif, "
                                  "izhikevich, eif, qif) or a neuron-language file");
  app.add_option("--set", settings,
                 "a neuron setting k=v (tau=2, v_reset=none, surrogate=atan(2), ...); repeatable")
      ->type_name("K=V")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  auto* o_T = app.add_option("--T", T, "time steps per sample")->check(CLI::PositiveNumber);
  auto* o_epochs =
      app.add_option("--epochs", epochs, "epochs to train")->check(CLI::PositiveNumber);
  auto* o_batch = app.add_option("--batch", batch, "samples per batch")->check(CLI::PositiveNumber);
  auto* o_lr = app.add_option("--lr", lr, "base learning rate")->check(CLI::PositiveNumber);
  auto* o_opt = app.add_option("--optimizer", optimizer, "sgd | adam | adamw")
                    ->check(CLI::IsMember({"sgd", "adam", "adamw"}));
  auto* o_mom =
      app.add_option("--momentum", momentum, "SGD momentum")->check(CLI::Range(0.0, 0.999999));
  auto* o_nest = app.add_flag("--nesterov", nesterov, "Nesterov momentum (SGD)");
  auto* o_wd = app.add_option("--weight-decay", weight_decay,
                              "L2 (sgd, adam) or decoupled (adamw) weight decay")
                   ->check(CLI::NonNegativeNumber);
  auto* o_loss =
      app.add_option("--loss", loss, "ce (softmax cross-entropy) | mse, on the output spike rate")
          ->check(CLI::IsMember({"ce", "mse", "cross_entropy"}));
  auto* o_sched =
      app.add_option("--schedule", schedule, "learning-rate schedule: constant | step | cosine")
          ->check(CLI::IsMember({"constant", "step", "cosine"}));
  auto* o_step =
      app.add_option("--step-size", step_size, "step schedule: epochs between decays (30)")
          ->check(CLI::PositiveNumber);
  auto* o_gamma = app.add_option("--gamma", gamma, "step schedule: decay factor (0.1)")
                      ->check(CLI::PositiveNumber);
  app.add_option("--device", c.device, "cpu | cuda | cuda:N | auto")->default_str("auto");
  auto* o_precision =
      app.add_option("--precision", precision,
                     "f32 | flex16 (weights, activations, gradients and optimizer state in "
                     "flex16 with Autoflex exponents; spikes u8)")
          ->check(CLI::IsMember({"f32", "flex16"}))
          ->default_str("f32");
  auto* o_master = app.add_option("--master-weights", master_weights,
                                  "flex16: f32 (the optimizer updates an f32 copy) | flex16 "
                                  "(weights only in flex16)")
                       ->check(CLI::IsMember({"f32", "flex16"}))
                       ->default_str("f32");
  auto* o_rounding =
      app.add_option("--rounding", rounding,
                     "flex16: stochastic (the default: the optimizer's flex16 writes round "
                     "stochastically, seeded from --seed, so a run repeats bit for bit) | "
                     "nearest")
          ->check(CLI::IsMember({"nearest", "stochastic"}))
          ->default_str("stochastic");
  auto* o_seed = app.add_option("--seed", seed, "seed of initialisation, shuffling and dropout")
                     ->default_str("0");
  auto* o_limit = app.add_option("--limit", limit, "train (and test) on the first N samples only")
                      ->check(CLI::NonNegativeNumber);
  app.add_option("--data", c.data_dir,
                 "directory of the Fashion-MNIST IDX files (default: $FLEXKIT_DATA_DIR or "
                 "/usr/share/datasets/fashion-mnist)");
  app.add_option("--checkpoint", c.checkpoint_dir,
                 "directory for a checkpoint per epoch (epoch-N.ckpt) and the best (best.ckpt)");
  app.add_option("--resume", c.resume, "continue from a checkpoint; options not given come from it")
      ->check(CLI::ExistingFile);
  app.add_option("--save", c.save, "write the trained weights and the model description as .npz");
  app.add_option("--summary", c.summary, "write a JSON summary");
  app.add_flag("--quiet,-q", c.quiet, "no progress output");
  std::string cuda_graph = "on";
  app.add_option("--cuda-graph", cuda_graph,
                 "on: replay each full batch's training step from one captured CUDA graph where "
                 "the run allows it (f32, one process, no dropout); off: queue every kernel from "
                 "the host. The results are the same bit for bit")
      ->default_str("on")
      ->check(CLI::IsMember({"on", "off"}));
  bool distributed = false;
  double collective_timeout = 300;
  app.add_flag("--distributed", distributed,
               "data-parallel training over the processes started by `mpirun -np N flexkit train "
               "--distributed ...`: each trains on its part of every batch (--batch in all), the "
               "gradients are summed over them; rank 0 prints and writes the files (f32)");
  app.add_flag("--sync-bn", c.sync_bn,
               "--distributed: BatchNorm statistics over every process's part of the batch "
               "together (as one process would take them), not each process's own");
  app.add_option("--collective-timeout", collective_timeout,
                 "--distributed: seconds a collective may wait for the other processes before "
                 "the job is stopped (a process died or hangs)")
      ->default_str("300")
      ->check(CLI::PositiveNumber);
  if (const auto rc = parse(app, args)) return *rc;
  c.cuda_graph = cuda_graph == "on";
  if (c.sync_bn && !distributed) {
    std::fprintf(stderr, "flexkit train: --sync-bn goes with --distributed\n");
    return kUsageError;
  }
  if (distributed) {
#if FLEXKIT_HAVE_MPI
    if (!dist::launched_by_mpi()) {
      std::fprintf(stderr,
                   "flexkit train: --distributed runs as one of several processes; start them "
                   "with `mpirun -np N flexkit train --distributed ...`\n");
      return kUsageError;
    }
    c.communicator = dist::mpi_world(collective_timeout);
#else
    std::fprintf(stderr,
                 "flexkit train: --distributed needs MPI, and this flexkit was built without it "
                 "(install Debian's libopenmpi-dev and openmpi-bin, then rebuild)\n");
    return 1;
#endif
  }

  if (*o_model) c.model = model;
  if (*o_neuron) c.neuron = neuron;
  for (const std::string& s : settings) {
    const auto eq = s.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::fprintf(stderr,
                   "flexkit train: --set takes K=V (a neuron parameter and its value), got '%s'\n",
                   s.c_str());
      return kUsageError;
    }
    c.neuron_settings.emplace_back(s.substr(0, eq), s.substr(eq + 1));
  }
  if (*o_T) c.time_steps = T;
  if (*o_epochs) c.epochs = epochs;
  if (*o_batch) c.batch = batch;
  if (*o_lr) c.lr = lr;
  if (*o_opt) c.optimizer = optimizer;
  if (*o_mom) c.momentum = momentum;
  if (*o_nest) c.nesterov = nesterov;
  if (*o_wd) c.weight_decay = weight_decay;
  if (*o_loss) c.loss = loss;
  if (*o_sched) c.schedule = schedule;
  if (*o_step) c.step_size = step_size;
  if (*o_gamma) c.gamma = gamma;
  if (*o_seed) c.seed = seed;
  if (*o_limit) c.limit = limit;
  if (*o_precision) c.precision = precision;
  if (*o_master) c.master_weights = master_weights;
  if (*o_rounding) c.rounding = rounding;

  std::signal(SIGINT, on_interrupt);
  std::signal(SIGTERM, on_interrupt);
  try {
    const nn::TrainResult r = nn::train(c);
    std::signal(SIGINT, SIG_DFL);
    return r.interrupted ? 130 : 0;
  } catch (const std::exception& e) {
    const int code = dynamic_cast<const nn::TrainingDiverged*>(&e) ? 3 : 1;
    if (!c.communicator) {
      if (code != 3) throw;  // main() prints it
      std::fprintf(stderr, "flexkit train: error: %s\n", e.what());
      return code;
    }
    // The other processes would wait for this one in their next collective: stop them all.
    std::fprintf(stderr, "flexkit train: rank %d of %d: error: %s\n", c.communicator->rank(),
                 c.communicator->size(), e.what());
    std::fflush(stderr);
    c.communicator->abort(code);
    return code;  // not reached
  }
}

int eval_command(const Args& args) {
  CLI::App app{"Test-set accuracy of a checkpoint's weights.", "flexkit eval"};
  std::string resume, device = "auto", data;
  std::int64_t limit = 0;
  app.add_option("--resume,checkpoint", resume, "the checkpoint to evaluate")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("--device", device, "cpu | cuda | cuda:N | auto")->default_str("auto");
  app.add_option("--data", data, "directory of the Fashion-MNIST IDX files");
  app.add_option("--limit", limit, "the first N test samples only")->check(CLI::NonNegativeNumber);
  if (const auto rc = parse(app, args)) return *rc;
  const nn::EvalResult r = nn::evaluate_checkpoint(resume, device, data, limit);
  std::printf("model %s\ndevice %s\ntest samples %lld\ntest loss %.6f\ntest accuracy %.4f\n",
              r.architecture.c_str(), r.device.c_str(), static_cast<long long>(r.samples),
              r.test_loss, r.test_accuracy);
  return 0;
}

}  // namespace flexkit::cli
