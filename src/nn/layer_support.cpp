#include "nn/layer_support.hpp"

#include "flexkit/expr.hpp"
#include "gemm/exact_sums.hpp"
#include "nn/heavy_ops.hpp"

namespace flexkit::nn {

using detail::cat;
using detail::convert_parameter;

void Layer::to(Device device) {
  device_ = device;
}

void Layer::set_precision(const Precision& precision) {
  if (precision.dtype != DType::f32 && precision.dtype != DType::flex16)
    throw ValueError(
        cat(describe(), ": precision ", dtype_name(precision.dtype), " is not f32 or flex16"));
  for (Parameter* p : parameters())
    if (p->trainable) convert_parameter(*p, precision);
  precision_ = precision;
  managers_.clear();
}

std::vector<ManagedTensor> Layer::managed_tensors() const {
  std::vector<ManagedTensor> out;
  for (const auto& [role, m] : managers_) out.push_back(m);
  return out;
}

Autoflex Layer::manager(const std::string& role, TensorClass tensor_class) {
  auto it = managers_.find(role);
  if (it == managers_.end())
    it = managers_.emplace(role, ManagedTensor{role, tensor_class, {}}).first;
  return it->second.manager;
}

Array Layer::new_tensor(const std::string& role, const Shape& shape, Device device,
                        TensorClass tensor_class) {
  if (!flex()) return Array::empty(shape, DType::f32, device);
  Array a = Array::empty(shape, DType::flex16, device);
  a.set_autoflex(manager(role, tensor_class));
  return a;
}

void Layer::set_gradient_sums(bool on) {
  if (on)
    for (Parameter* p : parameters())
      if (p->trainable)
        throw UnsupportedError(
            cat(describe(), ": its parameter gradients are not exact integer products, so they ",
                "cannot be summed exactly over processes (data-parallel flex16 training takes the ",
                "parameters of linear and conv layers only)"));
  gradient_sums_ = on;
}

void Layer::add_sums(Parameter& p, gemm::ExactSums sums) {
  if (!p.grad_sums) {
    p.grad_sums = std::make_shared<gemm::ExactSums>(std::move(sums));
    return;
  }
  gemm::ExactSums& total = *p.grad_sums;
  if (total.m != sums.m || total.n != sums.n || total.iwl_ab != sums.iwl_ab)
    throw ValueError(cat("the gradient sums of '", p.name, "' from two backward passes have ",
                         "different exponents (", total.iwl_ab, " and ", sums.iwl_ab,
                         ") and cannot be added exactly; zero the gradients between steps"));
  for (std::size_t i = 0; i < total.values.size(); ++i) total.values[i] += sums.values[i];
}

double Layer::gradient_beta(Parameter& p) {
  detail::ensure_grad(p);
  const bool zeroed = p.grad_zeroed;
  p.grad_zeroed = false;
  return zeroed ? 0.0 : 1.0;
}

void Layer::add_bias_gradient(Parameter& p, const Array& g) {
  detail::ensure_grad(p);
  const Array grad = p.grad.reshape({g.dim(0), 1});
  if (flex() && g.dtype() == DType::flex16) {
    // Σ g = g · 1: exact integers rounded once, as the weight gradients are.
    const Array ones = Array::ones({g.dim(1), 1}, DType::u8, g.device());
    if (gradient_sums_)
      add_sums(p, gemm::exact_sums(g, ones));
    else
      heavy::matmul(g, ones, grad, heavy_writes(gradient_beta(p)));
    return;
  }
  p.grad_zeroed = false;
  if (gradient_sums_)
    throw UnsupportedError(cat(describe(), ": exact gradient sums take a flex16 output gradient; ",
                               "got ", g.describe()));
  assign(grad, Expr(grad) + sum(Expr(g), 1), writes());
}

AssignOptions Layer::writes() const {
  AssignOptions o;
  if (flex()) o.iwl_policy = IwlPolicy::autoflex;
  return o;
}

HeavyOpOptions Layer::heavy_writes(double beta) const {
  HeavyOpOptions o;
  o.beta = beta;
  if (flex()) o.iwl_policy = IwlPolicy::autoflex;
  return o;
}

std::string_view tensor_class_name(TensorClass c) {
  switch (c) {
    case TensorClass::weights:
      return "weights";
    case TensorClass::activations:
      return "activations";
    case TensorClass::gradients:
      return "gradients";
    case TensorClass::optimizer_state:
      return "optimizer state";
  }
  return "?";
}

std::vector<std::pair<std::string, std::string>> precision_formats(const Precision& p) {
  if (p.dtype != DType::flex16) return {{"everything", "f32"}};
  return {{"weights", p.master_weights ? "flex16 (autoflex), updated from an f32 master copy"
                                       : "flex16 (autoflex)"},
          {"activations", "flex16 (autoflex); spikes u8"},
          {"gradients", "flex16 (autoflex)"},
          {"optimizer state", "flex16 (autoflex); Adam's second moment f32"},
          {"matrix products and convolutions", "exact integer sums, rounded once"},
          {"batch statistics, BatchNorm running estimates", "f32"},
          {"neuron residuals (what backward re-reads)",
           "f32; none after a BatchNorm up to T = 16 (replayed from its kept input)"},
          {"spike rates and loss", "f32"}};
}

namespace detail {

ActivationShape split_activation(const Array& x, const std::string& layer) {
  if (!x.defined()) throw ValueError(cat(layer, ": the input is an empty array handle"));
  if (x.rank() < 3)
    throw ShapeError(cat(layer, ": expected an activation (*features, T, N), got ", x.describe()));
  ActivationShape a;
  a.features = Shape(x.shape().begin(), x.shape().end() - 2);
  a.steps = x.dim(x.rank() - 2);
  a.batch = x.dim(x.rank() - 1);
  return a;
}

Shape with_time_batch(const Shape& features, std::int64_t steps, std::int64_t batch) {
  Shape s = features;
  s.push_back(steps);
  s.push_back(batch);
  return s;
}

void ensure_grad(Parameter& p) {
  if (!p.grad.defined() || p.grad.shape() != p.value.shape() ||
      p.grad.device() != p.value.device() || p.grad.dtype() != p.value.dtype()) {
    p.grad = Array::zeros(p.value.shape(), p.value.dtype(), p.value.device());
    p.grad_zeroed = true;
  }
}

void convert_parameter(Parameter& p, const Precision& precision) {
  if (precision.dtype == DType::flex16) {
    const Array exact = p.master.defined() ? p.master : p.value;
    p.master = Array();
    if (precision.master_weights)
      p.master = exact.dtype() == DType::f32 ? exact.clone() : evaluate(Expr(exact));
    if (p.value.dtype() != DType::flex16) {
      Array v = Array::empty(p.value.shape(), DType::flex16, p.value.device());
      assign(v, Expr(exact), {.iwl_policy = IwlPolicy::autoflex});
      p.value = v;
    }
  } else {
    if (p.value.dtype() != DType::f32)
      p.value = p.master.defined() ? p.master : evaluate(Expr(p.value));
    p.master = Array();
  }
  p.grad = Array();
}

Array copy_keeping_manager(const Array& a, Device device) {
  Array c = a.copy_to(device);
  if (a.dtype() == DType::flex16) c.set_autoflex(a.autoflex());
  return c;
}

Parameter make_parameter(std::string name, const Shape& shape, bool trainable) {
  Parameter p;
  p.name = std::move(name);
  p.value = Array::zeros(shape, DType::f32);
  p.trainable = trainable;
  return p;
}

void move_parameter(Parameter& p, Device device) {
  if (p.value.defined() && p.value.device() != device)
    p.value = copy_keeping_manager(p.value, device);
  if (p.grad.defined() && p.grad.device() != device) p.grad = copy_keeping_manager(p.grad, device);
  if (p.master.defined() && p.master.device() != device) p.master = p.master.copy_to(device);
}

std::string shape_json(const Shape& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += cat(i ? ", " : "", s[i]);
  return out + "]";
}

std::string bool_text(bool b) {
  return b ? "true" : "false";
}

}  // namespace detail
}  // namespace flexkit::nn
