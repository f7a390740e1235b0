// The options of a training run resolved: a preset's values, then a resumed checkpoint's, then
// the ones given, checked; and what the resolved options build (the precision, the optimizer's
// options, the neuron, the model) and their canonical text (hashed, and saved in checkpoints).
#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include "core/text.hpp"
#include "flexkit/error.hpp"
#include "flexkit/train.hpp"
#include "nn/train/checkpoint.hpp"
#include "nn/train/model_export.hpp"

namespace flexkit::nn {

using flexkit::detail::cat;

namespace {

const Preset* find_preset(const std::string& name) {
  for (const Preset& p : presets())
    if (p.name == name) return &p;
  return nullptr;
}

std::string format_double(double v) {
  char buffer[40];
  std::snprintf(buffer, sizeof buffer, "%.17g", v);
  return buffer;
}

void check_positive(std::int64_t v, const char* what) {
  if (v <= 0) throw ValueError(cat(what, " must be positive, got ", v));
}

}  // namespace

ResolvedConfig resolve_config(const TrainConfig& config, const std::string& checkpoint_text) {
  const std::map<std::string, std::string> saved = parse_config_lines(checkpoint_text);
  auto from_saved = [&](const char* key) -> std::optional<std::string> {
    auto it = saved.find(key);
    if (it == saved.end()) return std::nullopt;
    return it->second;
  };
  ResolvedConfig r;
  const std::string model = config.model ? *config.model : from_saved("model").value_or("mlp");
  const Preset* preset = find_preset(model);
  r.model = model;
  r.architecture = preset ? preset->architecture : model;
  const Preset& base = preset ? *preset : presets().front();
  auto pick_text = [&](const std::optional<std::string>& given, const char* key,
                       const std::string& fallback) {
    if (given) return *given;
    return from_saved(key).value_or(fallback);
  };
  auto pick_int = [&](const std::optional<std::int64_t>& given, const char* key,
                      std::int64_t fallback) {
    if (given) return *given;
    const auto s = from_saved(key);
    return s ? static_cast<std::int64_t>(std::stoll(*s)) : fallback;
  };
  auto pick_double = [&](const std::optional<double>& given, const char* key, double fallback) {
    if (given) return *given;
    const auto s = from_saved(key);
    return s ? std::stod(*s) : fallback;
  };
  r.neuron = pick_text(config.neuron, "neuron", base.neuron);
  if (!config.neuron_settings.empty() || config.neuron) {
    r.neuron_settings = config.neuron_settings;
  } else if (const auto s = from_saved("neuron_settings")) {
    std::istringstream in(*s);
    std::string item;
    while (std::getline(in, item, ';'))
      if (const auto eq = item.find('='); eq != std::string::npos)
        r.neuron_settings.emplace_back(item.substr(0, eq), item.substr(eq + 1));
  } else {
    r.neuron_settings = preset ? preset->neuron_settings : decltype(r.neuron_settings){};
  }
  r.time_steps = pick_int(config.time_steps, "time_steps", base.time_steps);
  r.epochs = pick_int(config.epochs, "epochs", base.epochs);
  r.batch = pick_int(config.batch, "batch", base.batch);
  r.lr = pick_double(config.lr, "lr", base.lr);
  r.momentum = pick_double(config.momentum, "momentum", base.momentum);
  r.weight_decay = pick_double(config.weight_decay, "weight_decay", base.weight_decay);
  r.nesterov = config.nesterov ? *config.nesterov
                               : from_saved("nesterov").value_or(base.nesterov ? "1" : "0") == "1";
  r.optimizer = pick_text(config.optimizer, "optimizer", base.optimizer);
  r.loss = pick_text(config.loss, "loss", base.loss);
  r.schedule = pick_text(config.schedule, "schedule", base.schedule);
  r.step_size = pick_int(config.step_size, "step_size", 30);
  r.gamma = pick_double(config.gamma, "gamma", 0.1);
  r.seed = config.seed ? *config.seed
                       : static_cast<std::uint64_t>(std::stoull(from_saved("seed").value_or("0")));
  r.limit = pick_int(config.limit, "limit", 0);
  r.precision = pick_text(config.precision, "precision", "f32");
  r.master_weights = pick_text(config.master_weights, "master_weights", "f32");
  // Stochastic rounding is flex16's default: the one setting within 0.3 points of f32 on both
  // presets (bench/RESULTS.md).
  r.rounding =
      pick_text(config.rounding, "rounding", r.precision == "flex16" ? "stochastic" : "nearest");

  check_positive(r.time_steps, "T (--T)");
  check_positive(r.epochs, "the number of epochs (--epochs)");
  check_positive(r.batch, "the batch size (--batch)");
  if (!(r.lr > 0) || !std::isfinite(r.lr))
    throw ValueError(cat("the learning rate (--lr) must be a positive number, got ", r.lr));
  if (r.limit < 0) throw ValueError(cat("--limit must not be negative, got ", r.limit));
  if (r.step_size <= 0) throw ValueError(cat("--step-size must be positive, got ", r.step_size));
  if (!(r.gamma > 0)) throw ValueError(cat("--gamma must be positive, got ", r.gamma));
  if (r.precision != "f32" && r.precision != "flex16")
    throw ValueError(cat("--precision ", r.precision, ": precisions are f32 and flex16"));
  if (r.master_weights != "f32" && r.master_weights != "flex16")
    throw ValueError(cat("--master-weights ", r.master_weights,
                         ": f32 (an f32 copy the optimizer updates) or flex16 (none)"));
  if (config.master_weights && r.precision != "flex16")
    throw ValueError("--master-weights goes with --precision flex16");
  if (r.rounding != "nearest" && r.rounding != "stochastic")
    throw ValueError(cat("--rounding ", r.rounding, ": nearest or stochastic"));
  if (config.rounding && r.precision != "flex16")
    throw ValueError("--rounding goes with --precision flex16");
  (void)parse_loss(r.loss);
  (void)parse_schedule(r.schedule);
  (void)make_optimizer(r.optimizer, r.optimizer_options());
  return r;
}

Precision ResolvedConfig::precision_settings() const {
  Precision p;
  p.dtype = precision == "flex16" ? DType::flex16 : DType::f32;
  p.master_weights = p.dtype == DType::flex16 && master_weights == "f32";
  return p;
}

OptimizerOptions ResolvedConfig::optimizer_options() const {
  OptimizerOptions o;
  o.momentum = optimizer == "sgd" ? momentum : 0.9;
  o.nesterov = nesterov;
  o.weight_decay = weight_decay;
  if (precision == "flex16" && rounding == "stochastic") {
    o.rounding = Rounding::stochastic;
    o.rounding_seed = seed;
  }
  return o;
}

Neuron ResolvedConfig::build_neuron() const {
  Neuron n = Neuron::named_or_file(neuron);
  for (const auto& [k, v] : neuron_settings) {
    try {
      n = n.with_setting(k, v);
      // A built-in's parameters have domains (tau > 0, ...): out of them it trains on NaN.
      if (neuron.find('/') == std::string::npos)
        for (const NeuronParamInfo& p : n.params())
          check_builtin_parameter(neuron, p.name, p.value);
    } catch (const std::invalid_argument& e) {
      throw ValueError(cat("--set ", k, "=", v, ": ", e.what()));
    }
  }
  return n;
}

Sequential ResolvedConfig::build_model() const {
  ArchitectureOptions options;
  options.time_steps = time_steps;
  options.neuron = build_neuron();
  options.neuron_spelling = neuron;
  options.dropout_seed = seed;
  Sequential net = parse_architecture(architecture, {1, 28, 28}, options);
  const Shape out = net.check_shapes({1, 28, 28});
  if (out != Shape{10})
    throw ShapeError(cat("the model ends in features ", shape_str(out),
                         "; a Fashion-MNIST classifier must end in 10 (the classes), e.g. "
                         "linear(10) followed by a spiking layer"));
  return net;
}

std::string ResolvedConfig::text() const {
  std::string settings;
  for (const auto& [k, v] : neuron_settings)
    settings += cat(settings.empty() ? "" : ";", k, "=", v);
  return cat("model=", model, "\narchitecture=", architecture, "\nneuron=", neuron,
             "\nneuron_settings=", settings, "\ntime_steps=", time_steps, "\nepochs=", epochs,
             "\nbatch=", batch, "\nlr=", format_double(lr), "\nmomentum=", format_double(momentum),
             "\nweight_decay=", format_double(weight_decay), "\nnesterov=", nesterov ? 1 : 0,
             "\noptimizer=", optimizer, "\nloss=", loss, "\nschedule=", schedule,
             "\nstep_size=", step_size, "\ngamma=", format_double(gamma), "\nseed=", seed,
             "\nlimit=", limit, "\nprecision=", precision, "\nmaster_weights=", master_weights,
             "\nrounding=", rounding, "\n");
}

}  // namespace flexkit::nn
