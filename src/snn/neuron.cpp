// Neuron: construction from text, built-ins and files; parameter settings; introspection.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/text.hpp"
#include "flexkit/neuron.hpp"
#include "snn/neuron_compiled.hpp"
#if FLEXKIT_HAVE_CUDA
#include "codegen/cuda_step_kernel_source.hpp"
#endif

namespace flexkit {

using detail::cat;

std::string_view to_string(NeuronKernelKind kind) {
  switch (kind) {
    case NeuronKernelKind::inference:
      return "inference";
    case NeuronKernelKind::inference_final_state:
      return "inference_final_state";
    case NeuronKernelKind::training_forward:
      return "training_forward";
    case NeuronKernelKind::backward:
      return "backward";
  }
  return "?";
}

Neuron Neuron::parse(std::string_view text, std::string_view origin) {
  return Neuron(snn::compile_neuron(parse_neuron(text, origin)));
}

Neuron Neuron::builtin(std::string_view name) {
  return parse(builtin_neuron_source(name), cat("built-in ", name));
}

Neuron Neuron::named_or_file(std::string_view name_or_path) {
  for (const std::string& name : builtin_neuron_names())
    if (name == name_or_path) return builtin(name);
  const std::filesystem::path path{std::string(name_or_path)};
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::string names;
    for (const std::string& name : builtin_neuron_names())
      names += cat(names.empty() ? "" : ", ", name);
    throw IoError(
        cat("'", name_or_path, "' is neither a built-in neuron (", names, ") nor a readable file"));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().size() > kMaxNeuronSourceBytes)
    throw NeuronError(
        cat(path.string(), ": the file is larger than ", kMaxNeuronSourceBytes, " bytes"), 0, 0);
  return parse(text.str(), path.string());
}

Neuron Neuron::with(std::string_view name, double value) const {
  check_builtin_parameter(impl_->spec.name, name, value);  // e.g. a time constant must be > 0
  return Neuron(snn::compile_neuron(with_parameter(impl_->spec, name, value)));
}

namespace {

bool has_param(const snn::NeuronSpec& spec, std::string_view name) {
  for (const snn::Param& p : spec.params)
    if (p.name == name) return true;
  return false;
}

double parse_number(std::string_view name, std::string_view text) {
  std::string s(text);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v))
    throw ValueError(cat("setting ", name, ": expected a finite number, got '", text, "'"));
  return v;
}

double parse_flag(std::string_view name, std::string_view text) {
  if (text == "true" || text == "True" || text == "1") return 1.0;
  if (text == "false" || text == "False" || text == "0") return 0.0;
  throw ValueError(cat("setting ", name, ": expected true, false, 1 or 0, got '", text, "'"));
}

snn::ExprPtr with_surrogate(const snn::ExprPtr& e, snn::Surrogate s, double alpha) {
  snn::Expr copy = *e;
  bool changed = false;
  for (snn::ExprPtr& arg : copy.args) {
    snn::ExprPtr next = with_surrogate(arg, s, alpha);
    changed = changed || next != arg;
    arg = std::move(next);
  }
  if (copy.kind == snn::ExprKind::kSpike) {
    copy.surrogate = s;
    copy.alpha = alpha;
    changed = true;
  }
  return changed ? std::make_shared<const snn::Expr>(std::move(copy)) : e;
}

snn::NeuronSpec set_surrogate(snn::NeuronSpec spec, std::string_view text) {
  // NAME or NAME(alpha), the way the language writes spike's second argument.
  std::string name(text), alpha_text;
  if (auto open = text.find('('); open != std::string_view::npos) {
    if (text.back() != ')')
      throw ValueError(cat("setting surrogate: expected NAME or NAME(alpha), got '", text, "'"));
    name = std::string(text.substr(0, open));
    alpha_text = std::string(text.substr(open + 1, text.size() - open - 2));
  }
  const snn::Surrogate all[] = {
      snn::Surrogate::kSigmoid,      snn::Surrogate::kAtan,     snn::Surrogate::kPiecewiseQuadratic,
      snn::Surrogate::kPiecewiseExp, snn::Surrogate::kSoftSign, snn::Surrogate::kSuperSpike,
      snn::Surrogate::kErf};
  std::string names;
  for (snn::Surrogate s : all) {
    if (snn::surrogate_name(s) != name) {
      names += cat(names.empty() ? "" : ", ", snn::surrogate_name(s));
      continue;
    }
    const double alpha =
        alpha_text.empty() ? snn::default_alpha(s) : parse_number("surrogate alpha", alpha_text);
    if (!(alpha > 0))
      throw ValueError(cat("setting surrogate: alpha must be positive, got ", alpha));
    for (snn::Statement& st : spec.statements) st.value = with_surrogate(st.value, s, alpha);
    return spec;
  }
  throw ValueError(cat("setting surrogate: unknown surrogate '", name, "'; surrogates: ", names));
}

}  // namespace

Neuron Neuron::with_setting(std::string_view name, std::string_view value) const {
  snn::NeuronSpec spec = impl_->spec;
  if (name == "surrogate") {
    spec = set_surrogate(std::move(spec), value);
  } else if (name == "v_reset" && has_param(spec, "soft_reset")) {
    if (value == "none" || value == "None") {
      spec = with_parameter(std::move(spec), "soft_reset", 1.0);
    } else {
      spec = with_parameter(std::move(spec), "v_reset", parse_number(name, value));
      spec = with_parameter(std::move(spec), "soft_reset", 0.0);
    }
  } else if (name == "decay_input" || name == "detach_reset" || name == "soft_reset") {
    spec = with_parameter(std::move(spec), name, parse_flag(name, value));
  } else if (name == "init_tau" && has_param(spec, "w") && !has_param(spec, "init_tau")) {
    const double tau = parse_number(name, value);
    if (!(tau > 1.0)) throw ValueError(cat("setting init_tau: must be > 1, got ", value));
    spec = with_parameter(std::move(spec), "w", -std::log(tau - 1.0));
  } else {
    const double number = parse_number(name, value);
    check_builtin_parameter(spec.name, name, number);
    spec = with_parameter(std::move(spec), name, number);
  }
  return Neuron(snn::compile_neuron(std::move(spec)));
}

Neuron Neuron::with_channel_affine() const {
  return Neuron(snn::channel_affine_neuron(*impl_));
}

const std::string& Neuron::name() const {
  return impl_->spec.name;
}
const std::vector<std::string>& Neuron::inputs() const {
  return impl_->spec.inputs;
}
const std::vector<std::string>& Neuron::states() const {
  return impl_->spec.states;
}
const std::vector<std::string>& Neuron::outputs() const {
  return impl_->spec.outputs;
}

std::vector<NeuronParamInfo> Neuron::params() const {
  std::vector<NeuronParamInfo> out;
  for (const snn::Param& p : impl_->spec.params)
    out.push_back({p.name, p.default_value, p.learnable, p.per_neuron});
  return out;
}

double Neuron::initial_state_value(std::string_view state) const {
  for (std::size_t s = 0; s < impl_->spec.states.size(); ++s)
    if (impl_->spec.states[s] == state) return impl_->initial_values[s];
  throw ValueError(cat("neuron ", name(), " has no state '", state, "'"));
}

std::string Neuron::source() const {
  if (impl_->inputs_kept)  // the map has no spelling in the language
    return cat("// input ", impl_->spec.inputs[0], " read as (", impl_->spec.inputs[0],
               " - bn_center[c]) * bn_scale[c] + bn_shift[c] per channel c\n",
               to_string(impl_->spec));
  return to_string(impl_->spec);
}
std::string Neuron::forward_program() const {
  return snn::describe_forward(*impl_);
}
std::string Neuron::backward_program() const {
  return snn::describe_backward(*impl_);
}

std::vector<std::string> Neuron::residual_plan() const {
  std::vector<std::string> names;
  for (int r : impl_->residuals) names.push_back(snn::residual_name(*impl_, r));
  return names;
}

namespace {

snn::StepKernel default_kernel(const snn::NeuronCompiled& neuron, NeuronKernelKind kind) {
  if (kind == NeuronKernelKind::backward) {
    snn::BackwardKernelConfig config;
    config.grad_outputs.assign(neuron.spec.outputs.size(), DType::f32);
    config.grad_state_seqs.assign(neuron.spec.states.size(), std::nullopt);
    return snn::make_backward_kernel(neuron, config);
  }
  snn::ForwardKernelConfig config;
  config.kind = kind;
  config.input_dtypes.assign(neuron.spec.inputs.size(), DType::f32);
  return snn::make_forward_kernel(neuron, config);
}

}  // namespace

std::string Neuron::cuda_source(NeuronKernelKind kind) const {
#if FLEXKIT_HAVE_CUDA
  return snn::cuda_step_kernel_source(default_kernel(*impl_, kind));
#else
  (void)kind;
  throw UnsupportedError(
      "Neuron::cuda_source: this build of flexkit has no CUDA backend "
      "(FLEXKIT_CUDA=OFF or no CUDA toolkit), so no CUDA code generator");
#endif
}

std::string Neuron::cpu_program(NeuronKernelKind kind) const {
  return snn::to_string(default_kernel(*impl_, kind));
}

}  // namespace flexkit
