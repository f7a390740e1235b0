#include "flexkit/expr.hpp"
#include "nn/layer_support.hpp"

namespace flexkit::nn {

using namespace detail;

Dropout::Dropout(double p, std::uint64_t seed) : p_(p), rng_(seed) {
  if (!(p >= 0 && p < 1)) throw ValueError(cat("dropout: p must be in [0, 1), got ", p));
}

std::string Dropout::describe() const {
  return cat("dropout(", p_, ")");
}

Array Dropout::forward(const Array& x) {
  const ActivationShape a = split_activation(x, describe());
  if (!training_ || p_ == 0) return x;
  // One mask per (feature, sample), the same at every step; drawn on the host from the seed.
  Shape mask_shape = with_time_batch(a.features, 1, a.batch);
  std::vector<float> mask(static_cast<std::size_t>(shape_numel(mask_shape)));
  const float keep_scale = static_cast<float>(1.0 / (1.0 - p_));
  for (float& m : mask) m = rng_.uniform() < p_ ? 0.0f : keep_scale;
  mask_ = Array::from_floats(mask, mask_shape, DType::f32, x.device());
  Array y = new_tensor("output", x.shape(), x.device());
  assign(y, Expr(x) * mask_, writes());
  return y;
}

Array Dropout::backward(const Array& grad_output) {
  if (!training_ || p_ == 0) return grad_output;
  if (!mask_.defined()) throw ValueError(cat(describe(), ": backward without a training forward"));
  Array g = new_tensor("input gradient", grad_output.shape(), grad_output.device(),
                       TensorClass::gradients);
  assign(g, Expr(grad_output) * mask_, writes());
  mask_ = Array();
  return g;
}

JsonValue Dropout::config() const {
  return JsonValue::object({{"type", "dropout"},
                            {"p", p_},
                            {"mask", "one per feature and sample, shared by the time steps"}});
}

}  // namespace flexkit::nn
