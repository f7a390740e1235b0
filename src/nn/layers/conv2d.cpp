#include "flexkit/conv.hpp"
#include "flexkit/expr.hpp"
#include "nn/heavy_ops.hpp"
#include "nn/layer_support.hpp"

namespace flexkit::nn {

using namespace detail;

namespace detail {
void kaiming_uniform(Parameter& weight, Parameter* bias, std::int64_t fan_in, Rng& rng);
}

Conv2d::Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel,
               std::int64_t stride, std::int64_t padding, bool bias)
    : in_(in_channels),
      out_(out_channels),
      kernel_(kernel),
      stride_(stride),
      padding_(padding),
      has_bias_(bias) {
  if (in_ <= 0 || out_ <= 0 || kernel_ <= 0 || stride_ <= 0 || padding_ < 0)
    throw ValueError(cat(describe(),
                         ": channels, kernel and stride must be positive and the "
                         "padding not negative"));
  weight_ = make_parameter("weight", {in_, kernel_, kernel_, out_});
  if (has_bias_) bias_ = make_parameter("bias", {out_});
}

std::string Conv2d::describe() const {
  return cat("conv(", in_, ", ", out_, ", ", kernel_, ", stride=", stride_, ", padding=", padding_,
             ", bias=", bool_text(has_bias_), ")");
}

Shape Conv2d::output_features(const Shape& input) const {
  if (input.size() != 3)
    throw ShapeError(cat(describe(), ": expects image features (C, H, W), got ", shape_str(input)));
  if (input[0] != in_)
    throw ShapeError(cat(describe(), ": expects ", in_, " input channels, got ", input[0]));
  Shape out{out_};
  for (int d = 1; d <= 2; ++d) {
    const std::int64_t extent = (input[d] + 2 * padding_ - kernel_) / stride_ + 1;
    if (input[d] + 2 * padding_ < kernel_ || extent <= 0)
      throw ShapeError(cat(describe(), ": the ", kernel_, "x", kernel_,
                           " filter is larger than the padded input ", shape_str(input)));
    out.push_back(extent);
  }
  return out;
}

Array Conv2d::forward(const Array& x) {
  const ActivationShape a = split_activation(x, describe());
  const Shape out_features = output_features(a.features);
  const Array x4 = x.contiguous().reshape({in_, a.features[1], a.features[2], a.merged()});
  const auto plan = conv_plan(x4.shape(), weight_.value.shape(),
                              ConvParams{.padding = {padding_}, .stride = {stride_}});
  Array y = new_tensor(has_bias_ ? "product" : "output", plan->output_shape(), x.device());
  const heavy::ConvSaved saved = heavy::conv_fprop(*plan, x4, weight_.value, y, training_,
                                                   heavy::ConvRoute::automatic, heavy_writes());
  saved_input_ = saved.input;
  saved_taps_ = saved.taps;
  if (has_bias_) {
    Array biased = new_tensor("output", y.shape(), x.device());
    assign(biased, Expr(y) + bias_.value.reshape({out_, 1, 1, 1}), writes());
    y = biased;
  }
  input_shape_ = x.shape();
  return y.reshape(with_time_batch(out_features, a.steps, a.batch));
}

Array Conv2d::backward(const Array& grad_output) {
  if (!saved_input_.defined())
    throw ValueError(cat(describe(), ": backward without a training forward"));
  const auto plan = conv_plan(saved_input_.shape(), weight_.value.shape(),
                              ConvParams{.padding = {padding_}, .stride = {stride_}});
  const Array g4 = grad_output.contiguous().reshape(plan->output_shape());
  Array grad_x;
  if (input_gradient_) {
    grad_x =
        new_tensor("input gradient", saved_input_.shape(), g4.device(), TensorClass::gradients);
    heavy::conv_bprop(*plan, weight_.value, g4, grad_x, heavy::ConvRoute::automatic,
                      heavy_writes());
  }
  ensure_grad(weight_);
  if (gradient_sums_)
    add_sums(weight_, heavy::conv_update_sums(*plan, {saved_input_}, g4));
  else
    heavy::conv_update(*plan, {saved_input_, saved_taps_}, g4, weight_.grad,
                       heavy_writes(gradient_beta(weight_)));
  if (has_bias_) add_bias_gradient(bias_, g4.reshape({out_, -1}));
  saved_input_ = Array();
  saved_taps_ = Array();
  return grad_x.defined() ? grad_x.reshape(input_shape_) : grad_x;
}

std::vector<Parameter*> Conv2d::parameters() {
  if (has_bias_) return {&weight_, &bias_};
  return {&weight_};
}

void Conv2d::reset_parameters(Rng& rng) {
  // Drawn in PyTorch's (K, C, R, S) order, then moved to the kernels' (C, R, S, K).
  Parameter torch_order = make_parameter("weight", {out_, in_, kernel_, kernel_});
  kaiming_uniform(torch_order, has_bias_ ? &bias_ : nullptr, in_ * kernel_ * kernel_, rng);
  weight_.value = to_conv_layout(torch_order.value).copy_to(device_);
  if (has_bias_) move_parameter(bias_, device_);
}

void Conv2d::to(Device device) {
  Layer::to(device);
  move_parameter(weight_, device);
  if (has_bias_) move_parameter(bias_, device);
  drop_saved();
}

JsonValue Conv2d::config() const {
  return JsonValue::object({{"type", "conv2d"},
                            {"in_channels", in_},
                            {"out_channels", out_},
                            {"kernel_size", kernel_},
                            {"stride", stride_},
                            {"padding", padding_},
                            {"bias", has_bias_},
                            {"weight_layout", "(out_channels, in_channels, kh, kw), as PyTorch"}});
}

}  // namespace flexkit::nn
