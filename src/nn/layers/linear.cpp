#include <cmath>

#include "flexkit/expr.hpp"
#include "nn/heavy_ops.hpp"
#include "nn/layer_support.hpp"

namespace flexkit::nn {

using namespace detail;

namespace {

// PyTorch's default: Kaiming-uniform with a = sqrt(5), which is U(-1/sqrt(fan_in), +) for the
// weight, and the same bound for the bias.
void fill_uniform(Parameter& p, double bound, Rng& rng) {
  std::vector<float> values(static_cast<std::size_t>(p.value.size()));
  for (float& v : values) v = static_cast<float>(rng.uniform(-bound, bound));
  p.value = Array::from_floats(values, p.value.shape(), DType::f32, p.value.device());
}

}  // namespace

namespace detail {
void kaiming_uniform(Parameter& weight, Parameter* bias, std::int64_t fan_in, Rng& rng) {
  const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
  fill_uniform(weight, bound, rng);
  if (bias) fill_uniform(*bias, bound, rng);
}
}  // namespace detail

Linear::Linear(std::int64_t in_features, std::int64_t out_features, bool bias)
    : in_(in_features), out_(out_features), has_bias_(bias) {
  if (in_features <= 0 || out_features <= 0)
    throw ValueError(
        cat("linear: sizes must be positive, got in ", in_features, ", out ", out_features));
  weight_ = make_parameter("weight", {out_, in_});
  if (has_bias_) bias_ = make_parameter("bias", {out_});
}

std::string Linear::describe() const {
  return cat("linear(", in_, ", ", out_, ", bias=", bool_text(has_bias_), ")");
}

Shape Linear::output_features(const Shape& input) const {
  if (input.size() != 1)
    throw ShapeError(cat(describe(), ": expects flat features (F), got ", shape_str(input),
                         "; put flatten before it"));
  if (input[0] != in_)
    throw ShapeError(cat(describe(), ": expects ", in_, " input features, got ", input[0]));
  return {out_};
}

Array Linear::forward(const Array& x) {
  const ActivationShape a = split_activation(x, describe());
  output_features(a.features);
  const Array x2 = x.contiguous().reshape({in_, a.merged()});
  // flex16: the exact product and the biased output are two tensors with managers of their own
  // (their ranges differ by the bias).
  Array y = new_tensor(has_bias_ ? "product" : "output", {out_, a.merged()}, x.device());
  heavy::matmul(weight_.value, x2, y, heavy_writes());
  if (has_bias_) {
    Array biased = new_tensor("output", y.shape(), x.device());
    assign(biased, Expr(y) + bias_.value.reshape({out_, 1}), writes());
    y = biased;
  }
  if (training_) {
    input_ = x2;
    input_shape_ = x.shape();
  }
  return y.reshape({out_, a.steps, a.batch});
}

Array Linear::backward(const Array& grad_output) {
  if (!input_.defined()) throw ValueError(cat(describe(), ": backward without a training forward"));
  const std::int64_t merged = input_.dim(1);
  const Array g2 = grad_output.contiguous().reshape({out_, merged});
  Array grad_x;
  if (input_gradient_) {
    grad_x = new_tensor("input gradient", {in_, merged}, g2.device(), TensorClass::gradients);
    heavy::matmul(weight_.value.T(), g2, grad_x, heavy_writes());
  }
  ensure_grad(weight_);
  if (gradient_sums_)
    add_sums(weight_, gemm::exact_sums(g2, input_.T()));
  else
    heavy::matmul(g2, input_.T(), weight_.grad, heavy_writes(gradient_beta(weight_)));
  if (has_bias_) add_bias_gradient(bias_, g2);
  input_ = Array();
  return grad_x.defined() ? grad_x.reshape(input_shape_) : grad_x;
}

std::vector<Parameter*> Linear::parameters() {
  if (has_bias_) return {&weight_, &bias_};
  return {&weight_};
}

void Linear::reset_parameters(Rng& rng) {
  kaiming_uniform(weight_, has_bias_ ? &bias_ : nullptr, in_, rng);
}

void Linear::to(Device device) {
  Layer::to(device);
  move_parameter(weight_, device);
  if (has_bias_) move_parameter(bias_, device);
  drop_saved();
}

JsonValue Linear::config() const {
  return JsonValue::object({{"type", "linear"},
                            {"in_features", in_},
                            {"out_features", out_},
                            {"bias", has_bias_},
                            {"weight_layout", "(out_features, in_features), as PyTorch"}});
}

}  // namespace flexkit::nn
