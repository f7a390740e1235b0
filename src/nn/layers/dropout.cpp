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
  // One mask per (feature, sample), the same at every step; drawn on the host from the seed, for
  // the global batch when this is a part of one (set_shard), and this part taken.
  const std::int64_t global = global_batch_ > 0 ? global_batch_ : a.batch;
  if (shard_offset_ < 0 || shard_offset_ + a.batch > global)
    throw ValueError(cat(describe(), ": samples [", shard_offset_, ", ", shard_offset_ + a.batch,
                         ") are not part of a global batch of ", global));
  const std::int64_t features = shape_numel(a.features);
  std::vector<float> mask(static_cast<std::size_t>(features * a.batch));
  const float keep_scale = static_cast<float>(1.0 / (1.0 - p_));
  for (std::int64_t f = 0; f < features; ++f)
    for (std::int64_t b = 0; b < global; ++b) {
      const float m = rng_.uniform() < p_ ? 0.0f : keep_scale;
      if (b >= shard_offset_ && b < shard_offset_ + a.batch)
        mask[static_cast<std::size_t>(f * a.batch + b - shard_offset_)] = m;
    }
  mask_ = Array::from_floats(mask, with_time_batch(a.features, 1, a.batch), DType::f32, x.device());
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

std::string Dropout::capture_obstacle() const {
  if (p_ == 0) return {};
  return cat(describe(), " draws its masks on the host at every step");
}

JsonValue Dropout::config() const {
  return JsonValue::object({{"type", "dropout"},
                            {"p", p_},
                            {"mask", "one per feature and sample, shared by the time steps"}});
}

}  // namespace flexkit::nn
