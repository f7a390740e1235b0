// Runs one flexkit::nn layer, loss or optimizer on .npy files, so that a PyTorch script
// (nn_torch_test.py) can check forward, backward and the updates against torch in float64.
//
//   nn_layer_tool CASE DIR [KEY=VALUE ...] [--device=cpu|cuda[:N]]
//
// --device (anywhere on the line, cpu by default) says where the case runs: every array read is
// copied there, the layer is moved there right after construction (before its parameters are
// assigned), and the results are copied back to the host to be written.
//
// Activations are in flexkit's layout (*features, T, N), batch innermost; parameters and their
// gradients are in PyTorch's layouts (Linear (out, in), Conv2d (K, C, R, S)). Every case reads
// x.npy and grad_y.npy (f32) and writes y.npy and grad_x.npy (forward in training mode, then
// backward), plus:
//
//   linear    weight.npy [bias.npy]           -> grad_weight.npy [grad_bias.npy]
//   conv      weight.npy [bias.npy]           -> grad_weight.npy [grad_bias.npy]
//             stride=S padding=P
//   maxpool   kernel=K [stride=S]
//   avgpool   kernel=K [stride=S]
//   bn        [weight.npy bias.npy] [running_mean.npy running_var.npy] [x_eval.npy]
//             momentum=M eps=E affine=0|1     -> grad_weight.npy grad_bias.npy,
//             running_mean.npy running_var.npy (after the step), y_eval.npy (evaluation
//             forward of x_eval.npy with those statistics)
//   flatten
//   dropout   p=P seed=S
//   spiking   neuron=NAME T=STEPS [w.npy] [set.NAME=VALUE ...] (Neuron::with_setting)
//                                             -> grad_<param>.npy for learnable parameters
//   loss      x.npy (classes, T, N), labels.npy (i32 [N]), kind=ce|mse
//             (no grad_y.npy, no y.npy)      -> loss.npy (f64 [1]), correct.npy (i32 [1]),
//                                                grad_x.npy, rate.npy
//   optimizer name=sgd|adam|adamw lr=LR steps=K momentum=M nesterov=0|1 weight_decay=D
//             beta1=B1 beta2=B2 eps=E; p0.npy, p1.npy, ... (initial values) and g0.npy,
//             g1.npy, ... (K, *shape) the gradient at each step
//             (no x.npy)                     -> out0.npy, out1.npy, ... (K, *shape) the
//                                                parameter after each step
//
// Exit status: 0 on success, 2 for a malformed command line, 3 when flexkit throws (the message
// goes to stderr as "error: ...").
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "flexkit/flexkit.hpp"
#include "flexkit/nn.hpp"

namespace {

using namespace flexkit;
namespace fs = std::filesystem;

constexpr int kUsageError = 2;
constexpr int kFlexkitError = 3;

constexpr char kUsage[] =
    "usage: nn_layer_tool CASE DIR [KEY=VALUE ...] [--device=cpu|cuda[:N]]\n"
    "cases: linear conv maxpool avgpool bn flatten dropout spiking loss optimizer\n";

struct UsageError {
  std::string message;
};

class Options {
 public:
  void set(std::string key, std::string value) { values_[std::move(key)] = std::move(value); }
  bool has(const std::string& key) const { return values_.count(key) != 0; }
  std::string text(const std::string& key, const std::string& fallback) const {
    const auto it = values_.find(key);
    return it == values_.end() ? fallback : it->second;
  }
  std::int64_t integer(const std::string& key, std::int64_t fallback) const {
    const auto it = values_.find(key);
    if (it == values_.end()) return fallback;
    std::int64_t v = 0;
    const std::string& s = it->second;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size())
      throw UsageError{key + "=" + s + " is not an integer"};
    return v;
  }
  double number(const std::string& key, double fallback) const {
    const auto it = values_.find(key);
    if (it == values_.end()) return fallback;
    try {
      std::size_t used = 0;
      const double v = std::stod(it->second, &used);
      if (used == it->second.size()) return v;
    } catch (const std::exception&) {
    }
    throw UsageError{key + "=" + it->second + " is not a number"};
  }
  // Settings given as set.NAME=VALUE, in name order.
  std::vector<std::pair<std::string, std::string>> prefixed(const std::string& prefix) const {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& [k, v] : values_)
      if (k.rfind(prefix, 0) == 0) out.emplace_back(k.substr(prefix.size()), v);
    return out;
  }

 private:
  std::map<std::string, std::string> values_;
};

// The case's directory and the device it runs on: arrays are loaded onto that device and saved
// from a host copy.
class Files {
 public:
  Files(fs::path dir, Device device) : dir_(std::move(dir)), device_(device) {}
  Device device() const { return device_; }
  bool exists(const std::string& name) const { return fs::exists(dir_ / name); }
  Array load(const std::string& name) const { return load_npy(dir_ / name, device_); }
  void save(const std::string& name, const Array& a) const {
    save_npy(dir_ / name, a.copy_to(Device::cpu()));
  }

 private:
  fs::path dir_;
  Device device_;
};

// Forward in training mode, backward of grad_y, and the activations written.
void run_layer(nn::Layer& layer, const Files& f) {
  layer.set_training(true);
  for (nn::Parameter* p : layer.parameters())
    if (p->trainable) p->grad = Array::zeros(p->value.shape(), DType::f32, p->value.device());
  const Array y = layer.forward(f.load("x.npy"));
  f.save("y.npy", y);
  f.save("grad_x.npy", layer.backward(f.load("grad_y.npy")));
}

nn::Parameter& parameter(nn::Layer& layer, const std::string& name) {
  for (nn::Parameter* p : layer.parameters())
    if (p->name == name) return *p;
  throw UsageError{layer.describe() + " has no parameter " + name};
}

// Loads weight.npy / bias.npy (PyTorch layouts) into a Linear or Conv2d, runs it and writes the
// parameter gradients back in PyTorch's layouts.
void run_affine(nn::Layer& layer, bool conv, bool bias, const Files& f) {
  const Array w = f.load("weight.npy");
  parameter(layer, "weight").value = conv ? to_conv_layout(w) : w;
  if (bias) parameter(layer, "bias").value = f.load("bias.npy");
  run_layer(layer, f);
  const Array gw = parameter(layer, "weight").grad;
  f.save("grad_weight.npy", conv ? from_conv_layout(gw) : gw);
  if (bias) f.save("grad_bias.npy", parameter(layer, "bias").grad);
}

void run_linear(const Options&, const Files& f) {
  const Array w = f.load("weight.npy");
  const bool bias = f.exists("bias.npy");
  nn::Linear layer(w.dim(1), w.dim(0), bias);
  layer.to(f.device());
  run_affine(layer, false, bias, f);
}

void run_conv(const Options& o, const Files& f) {
  const Array w = f.load("weight.npy");  // (K, C, R, S)
  if (w.rank() != 4 || w.dim(2) != w.dim(3)) throw UsageError{"weight.npy must be (K, C, R, R)"};
  const bool bias = f.exists("bias.npy");
  nn::Conv2d layer(w.dim(1), w.dim(0), w.dim(2), o.integer("stride", 1), o.integer("padding", 0),
                   bias);
  layer.to(f.device());
  run_affine(layer, true, bias, f);
}

void run_pool(nn::Pool2d::Mode mode, const Options& o, const Files& f) {
  nn::Pool2d layer(mode, o.integer("kernel", 2), o.integer("stride", 0));
  layer.to(f.device());
  run_layer(layer, f);
}

void run_bn(const Options& o, const Files& f) {
  const Array x = f.load("x.npy");
  const bool affine = o.integer("affine", 1) != 0;
  nn::BatchNorm layer(x.dim(0), o.number("momentum", 0.1), o.number("eps", 1e-5), affine);
  layer.to(f.device());
  if (affine && f.exists("weight.npy")) parameter(layer, "weight").value = f.load("weight.npy");
  if (affine && f.exists("bias.npy")) parameter(layer, "bias").value = f.load("bias.npy");
  if (f.exists("running_mean.npy"))
    parameter(layer, "running_mean").value = f.load("running_mean.npy");
  if (f.exists("running_var.npy"))
    parameter(layer, "running_var").value = f.load("running_var.npy");
  run_layer(layer, f);
  if (affine) {
    f.save("grad_weight.npy", parameter(layer, "weight").grad);
    f.save("grad_bias.npy", parameter(layer, "bias").grad);
  }
  f.save("running_mean.npy", parameter(layer, "running_mean").value);
  f.save("running_var.npy", parameter(layer, "running_var").value);
  if (f.exists("x_eval.npy")) {
    layer.set_training(false);
    f.save("y_eval.npy", layer.forward(f.load("x_eval.npy")));
  }
}

void run_flatten(const Options&, const Files& f) {
  nn::Flatten layer;
  layer.to(f.device());
  run_layer(layer, f);
}

void run_dropout(const Options& o, const Files& f) {
  nn::Dropout layer(o.number("p", 0.5), static_cast<std::uint64_t>(o.integer("seed", 0)));
  layer.to(f.device());
  run_layer(layer, f);
}

void run_spiking(const Options& o, const Files& f) {
  Neuron neuron = Neuron::builtin(o.text("neuron", "lif"));
  for (const auto& [name, value] : o.prefixed("set.")) neuron = neuron.with_setting(name, value);
  nn::Spiking layer(neuron, o.integer("T", 4));
  layer.to(f.device());
  for (nn::Parameter* p : layer.parameters())
    if (f.exists(p->name + ".npy")) p->value = f.load(p->name + ".npy").reshape({});
  run_layer(layer, f);
  for (nn::Parameter* p : layer.parameters())
    if (p->trainable) f.save("grad_" + p->name + ".npy", p->grad.reshape({1}));
}

void run_loss(const Options& o, const Files& f) {
  const nn::LossResult r =
      nn::rate_loss(f.load("x.npy"), f.load("labels.npy"), nn::parse_loss(o.text("kind", "ce")));
  f.save("loss.npy", Array::from_vector(std::vector<double>{r.loss}, {1}));
  f.save("correct.npy",
         Array::from_vector(std::vector<std::int32_t>{static_cast<std::int32_t>(r.correct)}, {1}));
  f.save("grad_x.npy", r.grad_output);
  f.save("rate.npy", r.rate);
}

// "p3.npy" from ("p", 3, ".npy").
std::string numbered(std::string_view prefix, std::size_t i, std::string_view suffix = "") {
  std::string s(prefix);
  s.append(std::to_string(i));
  s.append(suffix);
  return s;
}

void run_optimizer(const Options& o, const Files& f) {
  nn::OptimizerOptions options;
  options.momentum = o.number("momentum", options.momentum);
  options.nesterov = o.integer("nesterov", 0) != 0;
  options.weight_decay = o.number("weight_decay", options.weight_decay);
  options.beta1 = o.number("beta1", options.beta1);
  options.beta2 = o.number("beta2", options.beta2);
  options.eps = o.number("eps", options.eps);
  auto optimizer = nn::make_optimizer(o.text("name", "sgd"), options);
  const double lr = o.number("lr", 0.1);
  const std::int64_t steps = o.integer("steps", 5);

  std::vector<nn::Parameter> params;
  std::vector<Array> grads;
  for (std::size_t i = 0; f.exists(numbered("p", i, ".npy")); ++i) {
    nn::Parameter p;
    p.name = numbered("p", i);
    p.value = f.load(numbered("p", i, ".npy"));
    grads.push_back(f.load(numbered("g", i, ".npy")));
    if (grads.back().rank() != p.value.rank() + 1 || grads.back().dim(0) != steps)
      throw UsageError{numbered("g", i, ".npy must be (steps, *p.shape)")};
    params.push_back(std::move(p));
  }
  if (params.empty()) throw UsageError{"no p0.npy"};
  std::vector<nn::Parameter*> pointers;
  for (nn::Parameter& p : params) pointers.push_back(&p);

  std::vector<std::vector<float>> history(params.size());
  for (std::int64_t s = 0; s < steps; ++s) {
    for (std::size_t i = 0; i < params.size(); ++i) params[i].grad = grads[i](s, ellipsis).clone();
    optimizer->step(pointers, lr);
    for (std::size_t i = 0; i < params.size(); ++i) {
      const std::vector<float> v = params[i].value.to_floats();
      history[i].insert(history[i].end(), v.begin(), v.end());
    }
  }
  for (std::size_t i = 0; i < params.size(); ++i) {
    Shape shape = params[i].value.shape();
    shape.insert(shape.begin(), steps);
    f.save(numbered("out", i, ".npy"), Array::from_vector(history[i], shape));
  }
}

int run(int argc, char** argv) {
  Device device = Device::cpu();
  std::vector<std::string_view> args;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.starts_with("--device=")) {
      try {
        device = Device::parse(arg.substr(9));
      } catch (const std::exception& e) {
        throw UsageError{e.what()};
      }
    } else if (arg.starts_with("--")) {
      throw UsageError{"unknown option '" + std::string(arg) + "'"};
    } else {
      args.push_back(arg);
    }
  }
  if (args.size() < 2) throw UsageError{"expected CASE and DIR"};
  const std::string name(args[0]);
  const fs::path dir(args[1]);
  if (!fs::is_directory(dir)) throw UsageError{dir.string() + " is not a directory"};
  const Files files{dir, device};
  Options o;
  for (std::size_t i = 2; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    const std::size_t eq = arg.find('=');
    if (eq == std::string_view::npos || eq == 0)
      throw UsageError{"'" + std::string(arg) + "' is not KEY=VALUE"};
    o.set(std::string(arg.substr(0, eq)), std::string(arg.substr(eq + 1)));
  }
  if (name == "linear")
    run_linear(o, files);
  else if (name == "conv")
    run_conv(o, files);
  else if (name == "maxpool")
    run_pool(nn::Pool2d::Mode::max, o, files);
  else if (name == "avgpool")
    run_pool(nn::Pool2d::Mode::average, o, files);
  else if (name == "bn")
    run_bn(o, files);
  else if (name == "flatten")
    run_flatten(o, files);
  else if (name == "dropout")
    run_dropout(o, files);
  else if (name == "spiking")
    run_spiking(o, files);
  else if (name == "loss")
    run_loss(o, files);
  else if (name == "optimizer")
    run_optimizer(o, files);
  else
    throw UsageError{"unknown case '" + name + "'"};
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "nn_layer_tool: %s\n%s", e.message.c_str(), kUsage);
    return kUsageError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kFlexkitError;
  }
}
