#include "nn/layer_support.hpp"

#include "flexkit/expr.hpp"

namespace flexkit::nn {

void Layer::to(Device device) {
  device_ = device;
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
  if (!p.grad.defined() || p.grad.shape() != p.value.shape() || p.grad.device() != p.value.device())
    p.grad = Array::zeros(p.value.shape(), DType::f32, p.value.device());
}

Parameter make_parameter(std::string name, const Shape& shape, bool trainable) {
  Parameter p;
  p.name = std::move(name);
  p.value = Array::zeros(shape, DType::f32);
  p.trainable = trainable;
  return p;
}

void move_parameter(Parameter& p, Device device) {
  if (p.value.defined() && p.value.device() != device) p.value = p.value.copy_to(device);
  if (p.grad.defined() && p.grad.device() != device) p.grad = p.grad.copy_to(device);
}

void require_f32(const LayerOptions& options, const std::string& layer) {
  if (options.dtype != DType::f32)
    throw UnsupportedError(cat(layer, ": storage dtype ", dtype_name(options.dtype),
                               " is not implemented yet; layers store f32"));
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
