// NeuronLayer: the functional calls with the states, parameters and residuals kept between them.
#include "core/text.hpp"
#include "flexkit/expr.hpp"
#include "flexkit/neuron.hpp"

namespace flexkit {

NeuronLayer::NeuronLayer(Neuron neuron, NeuronStorage storage)
    : neuron_(std::move(neuron)), storage_(storage) {}

NamedArrays NeuronLayer::operator()(const NamedArrays& inputs) {
  NeuronForward f = neuron_forward(neuron_, NeuronKernelKind::inference_final_state, inputs,
                                   states_, params_, storage_);
  states_ = std::move(f.final_states);
  residuals_.reset();
  return std::move(f.outputs);
}

NamedArrays NeuronLayer::forward(const NamedArrays& inputs) {
  NeuronForward f = neuron_forward(neuron_, NeuronKernelKind::training_forward, inputs, states_,
                                   params_, storage_);
  states_ = std::move(f.final_states);
  residuals_ = std::move(f.residuals);
  return std::move(f.outputs);
}

NeuronGradients NeuronLayer::backward(const NamedArrays& grad_outputs,
                                      const NamedArrays& grad_final_states) {
  if (!residuals_)
    throw ValueError(detail::cat("neuron layer ", neuron_.name(),
                                 ": backward() needs a forward() first (inference calls and "
                                 "reset() keep no residuals)"));
  NeuronGradients g = neuron_backward(neuron_, *residuals_, grad_outputs, {}, grad_final_states);
  for (const auto& [name, grad] : g.params) {
    auto it = grads_.find(name);
    if (it == grads_.end())
      grads_.emplace(name, grad.clone());
    else
      it->second = evaluate(Expr(it->second) + Expr(grad), DType::f32);
  }
  return g;
}

void NeuronLayer::reset() {
  states_.clear();
  residuals_.reset();
}

}  // namespace flexkit
