#include "flexkit/expr.hpp"
#include "nn/layer_support.hpp"

namespace flexkit::nn {

using namespace detail;

Spiking::Spiking(Neuron neuron, std::int64_t time_steps, std::string spelling)
    : neuron_(std::move(neuron)),
      steps_(time_steps),
      spelling_(spelling.empty() ? neuron_.name() : std::move(spelling)) {
  if (time_steps <= 0)
    throw ValueError(
        cat(spelling_, ": the number of time steps T must be positive, got ", time_steps));
  if (neuron_.inputs().size() != 1)
    throw ValueError(cat(spelling_, ": a spiking layer needs a neuron with one input; neuron ",
                         neuron_.name(), " has ", neuron_.inputs().size()));
  for (const NeuronParamInfo& p : neuron_.params())
    if (p.learnable && !p.per_neuron) {
      Parameter param = make_parameter(p.name, {});
      param.value = Array::full({}, p.value, DType::f32);
      params_.push_back(std::move(param));
    }
}

std::string Spiking::describe() const {
  return spelling_;
}

Array Spiking::forward(const Array& x) {
  return run_forward(x, nullptr);
}

Array Spiking::forward_folded(const Array& x, const BatchNorm::Fold& fold) {
  if (!training_) throw ValueError(cat(describe(), ": a folded forward is a training forward"));
  return run_forward(x, &fold);
}

Array Spiking::run_forward(const Array& x, const BatchNorm::Fold* fold) {
  const ActivationShape a = split_activation(x, describe());
  const int time_axis = x.rank() - 2;
  const Array seq = x.contiguous();
  // A one-step input is the same at every step: the kernel reads it at each of the T steps
  // (NeuronStorage::repeat_steps) and sums its gradient over them.
  repeated_input_ = a.steps == 1 && steps_ > 1;
  if (!repeated_input_ && a.steps != steps_)
    throw ShapeError(
        cat(describe(), ": the input has ", a.steps, " time steps, the layer runs ", steps_));
  NamedArrays params;
  for (const Parameter& p : params_) params.emplace(p.name, p.value);
  folded_ = fold != nullptr;
  if (fold) {
    params.emplace("bn_center", fold->center);
    params.emplace("bn_scale", fold->scale);
    params.emplace("bn_shift", fold->shift);
  }
  NeuronStorage storage;
  storage.time_axis = time_axis;
  storage.spike_dtype = DType::u8;  // 0/1 exactly, a quarter of f32's bytes
  if (repeated_input_) storage.repeat_steps = steps_;
  const NeuronKernelKind kind =
      training_ ? NeuronKernelKind::training_forward : NeuronKernelKind::inference_final_state;
  const Neuron neuron = fold ? neuron_.with_channel_affine() : neuron_;
  NeuronForward f = neuron_forward(neuron, kind, {{neuron_.inputs()[0], seq}}, {}, params, storage);
  residuals_ = training_ ? f.residuals : nullptr;
  input_shape_ = x.shape();
  Array out = f.outputs.at(neuron_.outputs()[0]);
  if (flex() && out.dtype() == DType::f32) {  // an output that is not a spike
    Array stored = new_tensor("output", out.shape(), out.device());
    assign(stored, Expr(out), writes());
    out = stored;
  }
  return out;
}

Array Spiking::backward(const Array& grad_output) {
  return run_backward({{neuron_.outputs()[0], grad_output.contiguous()}}, {});
}

Array Spiking::backward_through_pool(const PooledGradient& pooled) {
  return run_backward({}, {{neuron_.outputs()[0], pooled}});
}

Array Spiking::run_backward(const NamedArrays& grad_outputs,
                            const std::map<std::string, PooledGradient>& pooled) {
  if (!residuals_) throw ValueError(cat(describe(), ": backward without a training forward"));
  const Neuron neuron = folded_ ? neuron_.with_channel_affine() : neuron_;
  // Every batch starts from the initial states: no gradient for them.
  NeuronGradients g = neuron_backward(neuron, *residuals_, grad_outputs, {}, {},
                                      /*initial_state_gradients=*/false, pooled);
  residuals_ = nullptr;
  for (Parameter& p : params_) {
    ensure_grad(p);
    p.grad_zeroed = false;
    assign(p.grad, Expr(p.grad) + g.params.at(p.name).reshape({}), writes());
  }
  if (folded_) {
    fold_gradients_ = {g.params.at("bn_scale"), g.params.at("bn_shift")};
    folded_ = false;
    // dL/dy * scale, f32: BatchNorm::fold_backward turns it into the stored input gradient.
    return g.inputs.at(neuron_.inputs()[0]).reshape(input_shape_);
  }
  const Array gx = g.inputs.at(neuron_.inputs()[0]);  // f32, summed over T for a repeated input
  if (!flex()) return gx.reshape(input_shape_);
  Array out = new_tensor("input gradient", gx.shape(), gx.device(), TensorClass::gradients);
  assign(out, Expr(gx), writes());
  return out.reshape(input_shape_);
}

std::vector<Parameter*> Spiking::parameters() {
  std::vector<Parameter*> out;
  for (Parameter& p : params_) out.push_back(&p);
  return out;
}

void Spiking::reset_parameters(Rng&) {
  for (Parameter& p : params_)
    for (const NeuronParamInfo& info : neuron_.params())
      if (info.name == p.name) p.value = Array::full({}, info.value, DType::f32, device_);
}

void Spiking::to(Device device) {
  Layer::to(device);
  for (Parameter& p : params_) move_parameter(p, device);
  drop_saved();
}

void Spiking::drop_saved() {
  residuals_ = nullptr;
  folded_ = false;
  fold_gradients_ = {};
}

JsonValue Spiking::config() const {
  JsonValue params = JsonValue::object();
  for (const NeuronParamInfo& p : neuron_.params())
    params.set(p.name,
               JsonValue::object(
                   {{"value", p.value}, {"learnable", p.learnable}, {"per_neuron", p.per_neuron}}));
  JsonValue states = JsonValue::object();
  for (const std::string& s : neuron_.states()) states.set(s, neuron_.initial_state_value(s));
  return JsonValue::object({{"type", "spiking"},
                            {"neuron", neuron_.name()},
                            {"time_steps", steps_},
                            {"input", neuron_.inputs()[0]},
                            {"output", neuron_.outputs()[0]},
                            {"parameters", params},
                            {"initial_states", states},
                            {"state_reset", "every batch starts from the initial states"},
                            {"source", neuron_.source()}});
}

}  // namespace flexkit::nn
