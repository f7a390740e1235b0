// The functional calls: argument checks, dtype conversion, allocation of results, and the
// launch of the assembled step kernel on the arguments' device.
#include <algorithm>

#include "core/flex16_write.hpp"
#include "core/shard_agreement.hpp"
#include "core/text.hpp"
#include "flexkit/error.hpp"
#include "flexkit/expr.hpp"
#include "flexkit/neuron.hpp"
#include "flexkit/portable/flex16_codec.hpp"
#include "snn/neuron_compiled.hpp"
#include "snn/neuron_residuals.hpp"

namespace flexkit {

using detail::cat;

namespace {

std::string name_list(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += cat(out.empty() ? "" : ", ", n);
  return out.empty() ? "(none)" : out;
}

std::size_t index_of(const std::vector<std::string>& names, const std::string& name) {
  return static_cast<std::size_t>(std::find(names.begin(), names.end(), name) - names.begin());
}

bool is_float_dtype(DType d) {
  return d == DType::f32 || d == DType::f64 || d == DType::bf16 || d == DType::flex16;
}

bool is_sequence_dtype(DType d) {
  return d == DType::f32 || d == DType::bf16 || d == DType::flex16 || d == DType::u8 ||
         d == DType::f64;
}

// A sequence as a kernel reads it: contiguous, f64 converted to f32 (kernels load f32, bf16,
// flex16 and u8).
Array as_kernel_sequence(const Array& a) {
  if (a.dtype() == DType::f64) return evaluate(Expr(a), DType::f32);
  return a.contiguous();
}

Array as_f32(const Array& a) {
  if (a.dtype() == DType::f32) return a.contiguous();
  return evaluate(Expr(a), DType::f32);
}

void check_defined(const Array& a, const std::string& what) {
  if (!a.defined()) throw ValueError(cat(what, " is an empty array handle"));
}

void run(const snn::StepKernel& kernel, const snn::StepKernelLaunch& launch, Device device) {
  if (device.is_cuda())
    snn::run_step_kernel_cuda(kernel, launch);
  else
    snn::run_step_kernel_cpu(kernel, launch);
}

void check_storage(const NeuronStorage& s) {
  auto one_of = [](DType d, std::initializer_list<DType> allowed) {
    return std::find(allowed.begin(), allowed.end(), d) != allowed.end();
  };
  if (!one_of(s.sequence_dtype, {DType::f32, DType::bf16, DType::flex16}))
    throw DTypeError(cat("NeuronStorage::sequence_dtype must be f32, bf16 or flex16, not ",
                         dtype_name(s.sequence_dtype)));
  if (!one_of(s.spike_dtype, {DType::f32, DType::bf16, DType::flex16, DType::u8}))
    throw DTypeError(cat("NeuronStorage::spike_dtype must be f32, bf16, flex16 or u8, not ",
                         dtype_name(s.spike_dtype)));
  if (!one_of(s.residual_dtype, {DType::f32, DType::bf16, DType::flex16}))
    throw DTypeError(cat("NeuronStorage::residual_dtype must be f32, bf16 or flex16, not ",
                         dtype_name(s.residual_dtype)));
  if (s.flex16_iwl < kFlex16MinIwl || s.flex16_iwl > kFlex16MaxIwl)
    throw ValueError(cat("NeuronStorage::flex16_iwl must be in [", kFlex16MinIwl, ", ",
                         kFlex16MaxIwl, "], got ", s.flex16_iwl));
}

struct Geometry {
  std::int64_t steps = 0;
  Shape shape;  // of one step: the neurons
  std::int64_t neurons = 0;
  Device device = Device::cpu();
  int time_axis = 0;  // where T sits in the sequences
  // Neurons after the time axis: a sequence is [outer, T, inner] with outer * inner = neurons.
  std::int64_t inner = 0;

  Shape sequence_shape() const {
    Shape full = shape;
    full.insert(full.begin() + time_axis, steps);
    return full;
  }
  std::int64_t outer() const { return inner == 0 ? 0 : neurons / inner; }
  // Per-channel values: channels along the neuron shape's first axis.
  std::int64_t channels() const { return shape.empty() ? 1 : shape[0]; }
  std::int64_t channel_neurons() const { return channels() == 0 ? 0 : neurons / channels(); }
};

Geometry geometry(std::int64_t steps, Shape shape, int time_axis, Device device) {
  Geometry g;
  g.steps = steps;
  g.shape = std::move(shape);
  g.neurons = shape_numel(g.shape);
  g.device = device;
  g.time_axis = time_axis;
  g.inner = shape_numel(Shape(g.shape.begin() + time_axis, g.shape.end()));
  return g;
}

// A sequence of `g` as a launch takes it: [outer, T, inner], no copy (it is contiguous).
Array launch_view(const Array& a, const Geometry& g) {
  return a.reshape({g.outer(), g.steps, g.inner});
}

// A steady (one-step) input of `g`: [outer, 1, inner].
Array steady_view(const Array& a, const Geometry& g) {
  return a.reshape({g.outer(), 1, g.inner});
}

// The full shape of a one-step sequence of `g`.
Shape one_step_shape(const Geometry& g) {
  Shape full = g.shape;
  full.insert(full.begin() + g.time_axis, 1);
  return full;
}

Array new_sequence(const Geometry& g, DType dtype, int iwl) {
  Array a = Array::empty(g.sequence_shape(), dtype, g.device);
  if (dtype == DType::flex16) a.set_iwl(iwl);
  return a;
}

// Sequences by name: every name known, the same full shape (T at time_axis) and device, a float
// dtype.
Geometry check_sequences(const std::string& neuron, const NamedArrays& given,
                         const std::vector<std::string>& names, const char* what, int time_axis,
                         std::optional<Geometry> expected) {
  for (const auto& [name, array] : given) {
    if (index_of(names, name) == names.size())
      throw ValueError(cat("neuron ", neuron, ": no ", what, " '", name, "'; its ", what,
                           "s are: ", name_list(names)));
    check_defined(array, cat(what, " '", name, "'"));
    if (!is_sequence_dtype(array.dtype()))
      throw DTypeError(cat("neuron ", neuron, ": ", what, " '", name, "' is ", array.describe(),
                           "; sequences must be f32, f64, bf16, flex16 or u8"));
    if (array.rank() < 1)
      throw ShapeError(cat("neuron ", neuron, ": ", what, " '", name,
                           "' must be a sequence [T, ...], got ", array.describe()));
    if (expected) {
      if (array.device() != expected->device)
        throw DeviceError(cat("neuron ", neuron, ": ", what, " '", name, "' is on ",
                              array.device().str(), ", the other arguments on ",
                              expected->device.str()));
      if (array.shape() != expected->sequence_shape())
        throw ShapeError(cat("neuron ", neuron, ": ", what, " '", name, "' has shape ",
                             shape_str(array.shape()), ", expected ",
                             shape_str(expected->sequence_shape()), " (T at axis ",
                             expected->time_axis, " and the neuron shape of the other sequences)"));
      continue;
    }
    if (time_axis < 0 || time_axis >= array.rank())
      throw ValueError(cat("neuron ", neuron, ": NeuronStorage::time_axis is ", time_axis,
                           ", outside [0, ", array.rank() - 1, "] for ", what, " '", name, "' (",
                           array.describe(), ")"));
    Shape shape = array.shape();
    shape.erase(shape.begin() + time_axis);
    expected = geometry(array.dim(time_axis), std::move(shape), time_axis, array.device());
  }
  if (!expected) throw ValueError(cat("neuron ", neuron, ": no ", what, " sequences given"));
  return *expected;
}

// Per-step arrays by name (initial states, final-state gradients): [*shape], converted to f32.
std::vector<Array> per_neuron_arrays(const std::string& neuron, const NamedArrays& given,
                                     const std::vector<std::string>& names, const char* what,
                                     const Geometry& g) {
  std::vector<Array> out(names.size());
  for (const auto& [name, array] : given) {
    const std::size_t i = index_of(names, name);
    if (i == names.size()) {
      if (names.empty())
        throw ValueError(
            cat("neuron ", neuron, " has no states, but ", what, " '", name, "' was given"));
      throw ValueError(cat("neuron ", neuron, ": no state '", name, "' (", what,
                           "); its states are: ", name_list(names)));
    }
    check_defined(array, cat(what, " '", name, "'"));
    if (!is_float_dtype(array.dtype()))
      throw DTypeError(cat("neuron ", neuron, ": ", what, " '", name, "' is ", array.describe(),
                           "; expected a float dtype"));
    if (array.device() != g.device)
      throw DeviceError(cat("neuron ", neuron, ": ", what, " '", name, "' is on ",
                            array.device().str(), ", the sequences on ", g.device.str()));
    if (array.shape() != g.shape)
      throw ShapeError(cat("neuron ", neuron, ": ", what, " '", name, "' has shape ",
                           shape_str(array.shape()), ", expected the neuron shape ",
                           shape_str(g.shape)));
    out[i] = as_f32(array).reshape({g.neurons});
  }
  return out;
}

// Values of the run-time parameters ([1] or [N] f32), defaults where not given.
std::vector<Array> runtime_params(const snn::NeuronCompiled& c, const NamedArrays& given,
                                  const Geometry& g) {
  const auto& slots = c.step.runtime_params;
  std::vector<Array> out(slots.size());
  for (const auto& [name, array] : given) {
    auto it = std::find_if(slots.begin(), slots.end(),
                           [&](const snn::ParamSlot& s) { return s.name == name; });
    if (it == slots.end()) {
      bool fixed = false;
      for (const snn::Param& p : c.spec.params) fixed = fixed || p.name == name;
      if (fixed)
        throw ValueError(cat("neuron ", c.spec.name, ": parameter '", name,
                             "' is fixed (compiled into the kernel); set it with "
                             "Neuron::with(\"",
                             name, "\", value) instead of passing an array"));
      std::vector<std::string> names;
      for (const snn::ParamSlot& s : slots) names.push_back(s.name);
      throw ValueError(cat("neuron ", c.spec.name, ": no learnable or per-neuron parameter '", name,
                           "'; these take arrays: ", name_list(names)));
    }
    check_defined(array, cat("parameter '", name, "'"));
    if (!is_float_dtype(array.dtype()))
      throw DTypeError(cat("neuron ", c.spec.name, ": parameter '", name, "' is ", array.describe(),
                           "; expected a float dtype"));
    if (array.device() != g.device)
      throw DeviceError(cat("neuron ", c.spec.name, ": parameter '", name, "' is on ",
                            array.device().str(), ", the sequences on ", g.device.str()));
    const std::size_t slot = static_cast<std::size_t>(it - slots.begin());
    if (it->per_channel) {
      if (array.shape() != Shape{g.channels()})
        throw ShapeError(cat("neuron ", c.spec.name, ": per-channel parameter '", name,
                             "' has shape ", shape_str(array.shape()), ", expected [", g.channels(),
                             "] (the neuron shape's first axis)"));
      out[slot] = as_f32(array);
    } else if (it->per_neuron) {
      if (array.shape() != g.shape)
        throw ShapeError(cat("neuron ", c.spec.name, ": per-neuron parameter '", name,
                             "' has shape ", shape_str(array.shape()),
                             ", expected the neuron shape ", shape_str(g.shape)));
      out[slot] = as_f32(array).reshape({g.neurons});
    } else {
      if (array.size() != 1)
        throw ShapeError(cat("neuron ", c.spec.name, ": scalar parameter '", name,
                             "' must hold one value, got ", array.describe()));
      out[slot] = as_f32(array).reshape({1});
    }
  }
  for (std::size_t s = 0; s < slots.size(); ++s) {
    if (out[s].defined()) continue;
    if (slots[s].per_channel)
      throw ValueError(cat("neuron ", c.spec.name, ": per-channel parameter '", slots[s].name,
                           "' must be given (it has no default)"));
    double value = 0;
    for (const snn::Param& p : c.spec.params)
      if (p.name == slots[s].name) value = p.default_value;
    out[s] = Array::full({slots[s].per_neuron ? g.neurons : 1}, value, DType::f32, g.device);
  }
  return out;
}

// IwlPolicy::exact for the flex16 sequences whose plan asks for it: the kernel runs once with
// those sequences in float32 (it never reads what it stores, so they hold the very values the
// flex16 run rounds), and each takes the smallest iwl that holds its values.
void set_exact_iwls(const snn::NeuronCompiled& c, snn::ForwardKernelConfig config,
                    snn::StepKernelLaunch launch, const Geometry& g, std::vector<Array>& sequences,
                    const std::vector<detail::Flex16WritePlan>& plans) {
  bool any = false;
  for (const detail::Flex16WritePlan& plan : plans) any |= plan.policy == IwlPolicy::exact;
  if (!any) return;
  auto f32_for_flex16 = [](DType& d) {
    if (d == DType::flex16) d = DType::f32;
  };
  f32_for_flex16(config.storage.sequence_dtype);
  f32_for_flex16(config.storage.spike_dtype);
  f32_for_flex16(config.storage.residual_dtype);
  const std::shared_ptr<const snn::StepKernel> kernel = snn::forward_kernel(c, config);
  std::vector<Array> wide;
  launch.seq_out.clear();
  for (const snn::SequenceSlot& slot : kernel->seq_out) {
    wide.push_back(new_sequence(g, slot.dtype, 0));
    launch.seq_out.push_back(launch_view(wide.back(), g));
  }
  for (Array& final_state : launch.carried_final) final_state = Array();  // not written
  run(*kernel, launch, g.device);
  for (std::size_t s = 0; s < sequences.size(); ++s) {
    if (plans[s].policy != IwlPolicy::exact) continue;
    float largest = 0;  // NaN counts as 0 here, as the store writes it
    if (wide[s].size() > 0) {
      const Expr x(wide[s]);
      largest = evaluate(max(where(eq(x, x), abs(x), Expr(0.0))), DType::f32).to_floats().at(0);
    }
    sequences[s].set_iwl(portable::flex16_iwl_holding(detail::agreed_max_abs(largest)));
  }
}

}  // namespace

std::size_t residual_bytes(const NeuronResiduals& residuals) {
  std::size_t bytes = 0;  // the stored values; kept inputs belong to the caller
  const std::size_t stored = residuals.replayed ? 0
                             : residuals.neuron ? residuals.neuron->residuals.size()
                                                : residuals.values.size();
  for (std::size_t r = 0; r < stored && r < residuals.values.size(); ++r)
    bytes += residuals.values[r].nbytes();
  return bytes;
}

NeuronForward neuron_forward(const Neuron& neuron, NeuronKernelKind kind, const NamedArrays& inputs,
                             const NamedArrays& initial_states, const NamedArrays& params,
                             const NeuronStorage& storage) {
  const snn::NeuronCompiled& c = neuron.compiled();
  const std::string& name = c.spec.name;
  if (kind == NeuronKernelKind::backward)
    throw ValueError("neuron_forward runs the forward kinds; use neuron_backward for backward");
  check_storage(storage);
  for (const std::string& input : c.spec.inputs)
    if (!inputs.count(input))
      throw ValueError(cat("neuron ", name, ": input '", input,
                           "' is missing; inputs: ", name_list(c.spec.inputs)));
  Geometry g =
      check_sequences(name, inputs, c.spec.inputs, "input", storage.time_axis, std::nullopt);
  const bool steady = storage.repeat_steps > 0;
  if (storage.repeat_steps < 0)
    throw ValueError(
        cat("NeuronStorage::repeat_steps must not be negative, got ", storage.repeat_steps));
  if (steady) {
    if (g.steps != 1)
      throw ShapeError(cat("neuron ", name, ": NeuronStorage::repeat_steps reads one-step inputs, ",
                           "but the inputs have ", g.steps, " steps at axis ", g.time_axis));
    g.steps = storage.repeat_steps;
  }
  std::vector<Array> init =
      per_neuron_arrays(name, initial_states, c.spec.states, "initial state", g);
  std::vector<Array> param_values = runtime_params(c, params, g);

  snn::ForwardKernelConfig config;
  config.kind = kind;
  config.storage = storage;
  config.residuals_replayed = kind == NeuronKernelKind::training_forward &&
                              snn::replay_residuals(c, g.steps, !initial_states.empty());
  snn::StepKernelLaunch launch;
  launch.neurons = g.neurons;
  launch.steps = g.steps;
  launch.inner = g.inner;
  launch.channel_neurons = g.channel_neurons();
  std::vector<Array> kernel_inputs;
  for (const std::string& input : c.spec.inputs) {
    Array x = as_kernel_sequence(inputs.at(input));
    config.input_dtypes.push_back(x.dtype());
    launch.seq_in.push_back(steady ? steady_view(x, g) : launch_view(x, g));
    kernel_inputs.push_back(x);
  }
  const std::shared_ptr<const snn::StepKernel> kernel_ptr = snn::forward_kernel(c, config);
  const snn::StepKernel& kernel = *kernel_ptr;

  NeuronForward result;
  std::vector<Array> sequences;  // the inputs' full shape, in seq_out order
  std::vector<detail::Flex16WritePlan> plans;
  for (const snn::SequenceSlot& slot : kernel.seq_out) {
    Array s = new_sequence(g, slot.dtype, storage.flex16_iwl);
    detail::Flex16WritePlan plan;
    if (slot.dtype == DType::flex16) {
      if (storage.iwl_policy == IwlPolicy::autoflex) s.set_autoflex(storage.autoflex[slot.name]);
      plan = detail::plan_flex16_write(s, storage.iwl_policy, std::nullopt, "neuron_forward");
      if (plan.iwl) s.set_iwl(*plan.iwl);
    }
    sequences.push_back(s);
    plans.push_back(plan);
  }
  for (const Array& s : sequences) launch.seq_out.push_back(launch_view(s, g));
  for (std::size_t s = 0; s < c.spec.states.size(); ++s) {
    launch.carried_init.push_back(init[s]);
    Array final_state = Array::empty(g.shape, DType::f32, g.device);
    result.final_states.emplace(c.spec.states[s], final_state);
    launch.carried_final.push_back(final_state.reshape({g.neurons}));
  }
  launch.params = param_values;
  set_exact_iwls(c, config, launch, g, sequences, plans);
  run(kernel, launch, g.device);
  for (std::size_t s = 0; s < sequences.size(); ++s)
    if (sequences[s].dtype() == DType::flex16) detail::finish_flex16_write(sequences[s], plans[s]);

  std::size_t next = 0;
  for (const std::string& output : c.spec.outputs)
    result.outputs.emplace(output, sequences[next++]);
  if (snn::writes_state_sequences(config))
    for (const std::string& state : c.spec.states)
      result.state_sequences.emplace(state, sequences[next++]);
  if (kind == NeuronKernelKind::training_forward) {
    auto residuals = std::make_shared<NeuronResiduals>();
    residuals->neuron = neuron.compiled_ptr();
    residuals->neuron_shape = g.shape;
    residuals->steps = g.steps;
    residuals->time_axis = g.time_axis;
    residuals->device = g.device;
    residuals->residual_dtype = storage.residual_dtype;
    residuals->steady_inputs = steady;
    residuals->replayed = config.residuals_replayed;
    while (next < sequences.size()) residuals->values.push_back(sequences[next++]);
    if (c.inputs_kept)  // read by the backward where they are
      for (const Array& x : kernel_inputs) residuals->values.push_back(x);
    residuals->params = param_values;
    result.residuals = std::move(residuals);
  }
  return result;
}

namespace {

static_assert(PooledGradient::kMaxKernel == snn::kMaxPool, "one largest pooled window");

// A pooled output gradient checked against the geometry of the forward (see PooledGradient).
void check_pooled(const std::string& neuron, const std::string& output, const PooledGradient& p,
                  const Geometry& g) {
  const std::string what = cat("neuron ", neuron, ": the pooled gradient of output '", output, "'");
  check_defined(p.gradient, what);
  check_defined(p.source, cat(what, ", its source"));
  if (p.kernel < 1 || p.kernel > snn::kMaxPool)
    throw ValueError(
        cat(what, ": the pool's window must be 1 to ", snn::kMaxPool, ", got ", p.kernel));
  if (g.time_axis < 2)
    throw ValueError(cat(what,
                         ": the pool runs over the two neuron axes before the time axis, "
                         "which is at ",
                         g.time_axis));
  const std::int64_t k = p.kernel;
  const std::int64_t h = g.shape[static_cast<std::size_t>(g.time_axis - 2)];
  const std::int64_t w = g.shape[static_cast<std::size_t>(g.time_axis - 1)];
  if (h % k != 0 || w % k != 0)
    throw ShapeError(cat(what, ": ", k, " x ", k, " windows do not tile ", h, " x ", w));
  for (const Array* a : {&p.gradient, &p.source})
    if (a->device() != g.device)
      throw DeviceError(cat(what, ": ", a->describe(), " is on ", a->device().str(),
                            ", the residuals on ", g.device.str()));
  if (p.source.dtype() != DType::u8 || p.source.shape() != g.sequence_shape())
    throw ValueError(cat(what, ": the source must be the u8 output the pool read, ",
                         shape_str(g.sequence_shape()), ", got ", p.source.describe()));
  Shape pooled = g.sequence_shape();
  pooled[static_cast<std::size_t>(g.time_axis - 2)] /= k;
  pooled[static_cast<std::size_t>(g.time_axis - 1)] /= k;
  if (!is_float_dtype(p.gradient.dtype()) || p.gradient.shape() != pooled)
    throw ShapeError(cat(what, " must be a float sequence of shape ", shape_str(pooled), ", got ",
                         p.gradient.describe()));
}

}  // namespace

NeuronGradients neuron_backward(const Neuron& neuron, const NeuronResiduals& residuals,
                                const NamedArrays& grad_outputs,
                                const NamedArrays& grad_state_sequences,
                                const NamedArrays& grad_final_states, bool initial_state_gradients,
                                const std::map<std::string, PooledGradient>& pooled_grad_outputs) {
  const snn::NeuronCompiled& c = neuron.compiled();
  const std::string& name = c.spec.name;
  if (residuals.neuron.get() != &c)
    throw ValueError(cat("neuron ", name, ": these residuals were made by neuron ",
                         residuals.neuron ? residuals.neuron->spec.name : std::string("?"),
                         " with other parameter values (a different Neuron object); run "
                         "neuron_backward with the Neuron that ran the training forward"));
  const Geometry g =
      geometry(residuals.steps, residuals.neuron_shape, residuals.time_axis, residuals.device);
  if (!grad_outputs.empty())
    check_sequences(name, grad_outputs, c.spec.outputs, "output gradient", g.time_axis, g);
  if (!grad_state_sequences.empty()) {
    if (c.spec.states.empty())
      throw ValueError(
          cat("neuron ", name, " has no states, but state-sequence gradients were given"));
    check_sequences(name, grad_state_sequences, c.spec.states, "state-sequence gradient",
                    g.time_axis, g);
  }
  std::vector<Array> grad_final =
      per_neuron_arrays(name, grad_final_states, c.spec.states, "final-state gradient", g);
  if (pooled_grad_outputs.size() > 1)
    throw ValueError(cat("neuron ", name, ": at most one output gradient may come through a pool"));
  for (const auto& [output, pooled] : pooled_grad_outputs) {
    if (index_of(c.spec.outputs, output) == c.spec.outputs.size())
      throw ValueError(cat("neuron ", name, ": no output '", output,
                           "' (pooled gradient); its "
                           "outputs are: ",
                           name_list(c.spec.outputs)));
    if (grad_outputs.count(output) != 0)
      throw ValueError(cat("neuron ", name, ": output '", output,
                           "' has both a gradient and a pooled gradient"));
    check_pooled(name, output, pooled, g);
  }

  snn::BackwardKernelConfig config;
  config.residual_dtype = residuals.residual_dtype;
  config.steady_inputs = residuals.steady_inputs;
  config.replayed = residuals.replayed;
  const std::size_t stored = residuals.replayed ? 0 : c.residuals.size();
  for (std::size_t r = stored; r < residuals.values.size(); ++r)
    config.kept_inputs.push_back(residuals.values[r].dtype());
  snn::StepKernelLaunch launch;
  launch.neurons = g.neurons;
  launch.steps = g.steps;
  launch.inner = g.inner;
  launch.channel_neurons = g.channel_neurons();
  if (residuals.replayed) launch.seq_in.resize(c.residuals.size());  // no arrays: replayed
  for (std::size_t r = 0; r < residuals.values.size(); ++r) {
    const bool kept = r >= stored;
    launch.seq_in.push_back(kept && residuals.steady_inputs ? steady_view(residuals.values[r], g)
                                                            : launch_view(residuals.values[r], g));
  }
  for (const std::string& output : c.spec.outputs) {
    auto it = grad_outputs.find(output);
    if (auto pooled = pooled_grad_outputs.find(output); pooled != pooled_grad_outputs.end()) {
      const PooledGradient& p = pooled->second;
      Array gs = as_kernel_sequence(p.gradient);
      config.grad_outputs.push_back(gs.dtype());
      config.grad_output_pools.resize(config.grad_outputs.size(), 0);
      config.grad_output_pools.back() = static_cast<int>(p.kernel);
      launch.seq_in.push_back(gs.reshape({g.outer() / (p.kernel * p.kernel), g.steps, g.inner}));
      launch.pool_source = launch_view(p.source.contiguous(), g);
      launch.pool_height = g.shape[static_cast<std::size_t>(g.time_axis - 2)];
      launch.pool_width = g.shape[static_cast<std::size_t>(g.time_axis - 1)];
      continue;
    }
    if (it == grad_outputs.end()) {
      config.grad_outputs.push_back(std::nullopt);
      continue;
    }
    Array gs = as_kernel_sequence(it->second);
    config.grad_outputs.push_back(gs.dtype());
    launch.seq_in.push_back(launch_view(gs, g));
  }
  for (const std::string& state : c.spec.states) {
    auto it = grad_state_sequences.find(state);
    if (it == grad_state_sequences.end()) {
      config.grad_state_seqs.push_back(std::nullopt);
      continue;
    }
    Array gv = as_kernel_sequence(it->second);
    config.grad_state_seqs.push_back(gv.dtype());
    launch.seq_in.push_back(launch_view(gv, g));
  }
  const std::shared_ptr<const snn::StepKernel> kernel_ptr = snn::backward_kernel(c, config);
  const snn::StepKernel& kernel = *kernel_ptr;

  NeuronGradients result;
  if (!residuals.steady_inputs)
    for (const std::string& input : c.spec.inputs) {
      Array gx = new_sequence(g, DType::f32, 0);
      result.inputs.emplace(input, gx);
      launch.seq_out.push_back(launch_view(gx, g));
    }
  for (std::size_t s = 0; s < c.spec.states.size(); ++s) {
    launch.carried_init.push_back(grad_final[s]);
    if (!initial_state_gradients) {
      launch.carried_final.emplace_back();  // not stored
      continue;
    }
    Array gv0 = Array::empty(g.shape, DType::f32, g.device);
    result.initial_states.emplace(c.spec.states[s], gv0);
    launch.carried_final.push_back(gv0.reshape({g.neurons}));
  }
  if (residuals.steady_inputs)  // summed over the steps by the kernel, in its step order
    for (const std::string& input : c.spec.inputs) {
      Array gx = Array::empty(one_step_shape(g), DType::f32, g.device);
      result.inputs.emplace(input, gx);
      launch.carried_init.emplace_back();
      launch.carried_final.push_back(gx.reshape({g.neurons}));
    }
  // Scalar and per-channel parameters' partials come summed over groups of neurons where the
  // groups tile the rows and channels (N / 32 values to reduce instead of N).
  const std::int64_t group = snn::kFinalGroup;
  bool per_channel = false;
  for (const snn::ParamSlot& p : c.step.runtime_params) per_channel = per_channel || p.per_channel;
  if (g.neurons % group == 0 && g.inner % group == 0 &&
      (!per_channel || g.channel_neurons() % group == 0))
    launch.final_group = group;
  std::vector<Array> partials;
  for (int slot : snn::learnable_param_slots(c)) {
    const bool per_neuron = c.step.runtime_params[static_cast<std::size_t>(slot)].per_neuron;
    partials.push_back(
        Array::empty({g.neurons / (per_neuron ? 1 : launch.final_group)}, DType::f32, g.device));
    launch.carried_init.emplace_back();
    launch.carried_final.push_back(partials.back());
  }
  launch.params = residuals.params;
  run(kernel, launch, g.device);

  // A scalar (per-channel) parameter's gradient is the sum of the (channel's) per-neuron
  // partials, each already summed over time in a fixed order, reduced in the reduction kernels'
  // fixed order.
  std::size_t next = 0;
  for (int slot : snn::learnable_param_slots(c)) {
    const snn::ParamSlot& p = c.step.runtime_params[static_cast<std::size_t>(slot)];
    Array partial = partials[next++];
    if (p.per_neuron)
      result.params.emplace(p.name, partial.reshape(g.shape));
    else if (p.per_channel && g.channel_neurons() == 0)
      result.params.emplace(p.name, Array::zeros({g.channels()}, DType::f32, g.device));
    else if (p.per_channel)
      result.params.emplace(
          p.name,
          evaluate(
              sum(Expr(partial.reshape({g.channels(), g.channel_neurons() / launch.final_group})),
                  1),
              DType::f32));
    else if (g.neurons == 0)
      result.params.emplace(p.name, Array::zeros({}, DType::f32, g.device));
    else
      result.params.emplace(p.name, evaluate(sum(Expr(partial)), DType::f32).reshape({}));
  }
  return result;
}

}  // namespace flexkit
