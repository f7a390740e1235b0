#include "flexkit/expr.hpp"
#include "nn/layer_support.hpp"

namespace flexkit::nn {

using namespace detail;

BatchNorm::BatchNorm(std::int64_t channels, double momentum, double eps, bool affine)
    : channels_(channels), momentum_(momentum), eps_(eps), affine_(affine) {
  if (channels <= 0) throw ValueError(cat("bn: channels must be positive, got ", channels));
  if (!(momentum >= 0 && momentum <= 1)) throw ValueError("bn: momentum must be in [0, 1]");
  if (!(eps > 0)) throw ValueError("bn: eps must be positive");
  if (affine_) {
    weight_ = make_parameter("weight", {channels_});
    bias_ = make_parameter("bias", {channels_});
  }
  running_mean_ = make_parameter("running_mean", {channels_}, false);
  running_var_ = make_parameter("running_var", {channels_}, false);
  Rng unused;
  reset_parameters(unused);
}

std::string BatchNorm::describe() const {
  return cat("bn(", channels_, ")");
}

Shape BatchNorm::output_features(const Shape& input) const {
  if (input.empty() || input[0] != channels_)
    throw ShapeError(cat(describe(), ": expects ", channels_, " channels on the first axis, got ",
                         shape_str(input)));
  return input;
}

Array BatchNorm::forward(const Array& x) {
  const ActivationShape a = split_activation(x, describe());
  output_features(a.features);
  const Array x2 = x.contiguous().reshape({channels_, -1});
  const std::int64_t m = x2.dim(1);
  const Array gamma = affine_ ? weight_.value.reshape({channels_, 1}) : Array();
  const Array beta = affine_ ? bias_.value.reshape({channels_, 1}) : Array();
  Array y = new_tensor("output", x2.shape(), x.device());
  if (training_) {
    if (m < 2)
      throw ValueError(cat(describe(), ": batch statistics need more than one value per channel"));
    const Array mu = evaluate(mean(Expr(x2), 1));
    const Array var = evaluate(mean(sqr(Expr(x2) - mu), 1));
    inv_std_ = evaluate(reciprocal(sqrt(Expr(var) + eps_)));
    x_hat_ = new_tensor("normalised", x2.shape(), x.device());
    assign(x_hat_, (Expr(x2) - mu) * inv_std_, writes());
    assign(y, affine_ ? Expr(x_hat_) * gamma + beta : Expr(x_hat_), writes());
    update_running(mu, var, m);
    x_ = Array();
    mu_ = Array();
    input_shape_ = x.shape();
  } else {
    const Array rm = running_mean_.value.reshape({channels_, 1});
    const Array rv = running_var_.value.reshape({channels_, 1});
    Expr normalised = (Expr(x2) - rm) * reciprocal(sqrt(Expr(rv) + eps_));
    assign(y, affine_ ? normalised * gamma + beta : normalised, writes());
  }
  return y.reshape(x.shape());
}

void BatchNorm::update_running(const Array& mu, const Array& var, std::int64_t m) {
  const double unbias = static_cast<double>(m) / static_cast<double>(m - 1);
  Array rm = running_mean_.value.reshape({channels_, 1});
  Array rv = running_var_.value.reshape({channels_, 1});
  assign(rm, (1.0 - momentum_) * Expr(rm) + momentum_ * Expr(mu));
  assign(rv, (1.0 - momentum_) * Expr(rv) + (momentum_ * unbias) * Expr(var));
}

BatchNorm::Fold BatchNorm::fold_forward(const Array& x) {
  const ActivationShape a = split_activation(x, describe());
  output_features(a.features);
  const Array x2 = x.contiguous().reshape({channels_, -1});
  const std::int64_t m = x2.dim(1);
  if (m < 2)
    throw ValueError(cat(describe(), ": batch statistics need more than one value per channel"));
  // Few launches (a flex16 step is bound by its host time): the statistics, the scale, the
  // running estimates; the inverse deviation is recomputed inside the backward's expressions.
  const Array mu = evaluate(mean(Expr(x2), 1), DType::f32);
  var_ = evaluate(mean(sqr(Expr(x2) - mu), 1), DType::f32);
  update_running(mu, var_, m);
  x_ = x2;
  mu_ = mu;
  x_hat_ = Array();
  inv_std_ = Array();
  input_shape_ = x.shape();
  const Expr inv_std = reciprocal(sqrt(Expr(var_) + eps_));
  Fold fold;
  fold.center = mu.reshape({channels_});
  fold.scale =
      evaluate(affine_ ? inv_std * weight_.value.reshape({channels_, 1}) : inv_std, DType::f32)
          .reshape({channels_});
  fold.shift = affine_ ? bias_.value : Array::zeros({channels_}, DType::f32, x.device());
  return fold;
}

Array BatchNorm::fold_backward(const Array& grad_through_scale, const Array& sum_centered,
                               const Array& sum_g) {
  if (!x_.defined())
    throw ValueError(cat(describe(), ": fold_backward without a folded training forward"));
  const Array g = grad_through_scale.contiguous().reshape(x_.shape());
  const double m = static_cast<double>(x_.dim(1));
  const Array sc = sum_centered.reshape({channels_, 1});
  const Array s = sum_g.reshape({channels_, 1});
  const Expr inv_std = reciprocal(sqrt(Expr(var_) + eps_));
  // sum(dL/dy * x_hat) = inv_std * sum(dL/dy * (x - mean)).
  const Expr sum_g_xhat = inv_std * sc;
  Expr scale = inv_std;
  if (affine_) {
    scale = scale * weight_.value.reshape({channels_, 1});
    ensure_grad(weight_);
    ensure_grad(bias_);
    Array gw = weight_.grad.reshape({channels_, 1});
    Array gb = bias_.grad.reshape({channels_, 1});
    assign(gw, Expr(gw) + sum_g_xhat, writes());
    assign(gb, Expr(gb) + s, writes());
  }
  // What the unfused backward computes, scale * (g_y - sum/m - x_hat * sum_g_xhat/m), with
  // scale * g_y given; the per-channel factors are recomputed per element, in the one pass.
  Array grad_x = new_tensor("input gradient", g.shape(), g.device(), TensorClass::gradients);
  assign(grad_x,
         Expr(g) - scale * Expr(s) * (1.0 / m) -
             scale * inv_std * sum_g_xhat * (1.0 / m) * (Expr(x_) - mu_),
         writes());
  x_ = Array();
  mu_ = Array();
  var_ = Array();
  return grad_x.reshape(input_shape_);
}

Array BatchNorm::backward(const Array& grad_output) {
  if (!x_hat_.defined()) throw ValueError(cat(describe(), ": backward without a training forward"));
  const Array g = grad_output.contiguous().reshape(x_hat_.shape());
  const double m = static_cast<double>(g.dim(1));
  const Array sum_g = evaluate(sum(Expr(g), 1));
  const Array sum_g_xhat = evaluate(sum(Expr(g) * x_hat_, 1));
  Array grad_x = new_tensor("input gradient", g.shape(), g.device(), TensorClass::gradients);
  Expr scale = Expr(inv_std_);
  if (affine_) {
    scale = scale * weight_.value.reshape({channels_, 1});
    ensure_grad(weight_);
    ensure_grad(bias_);
    Array gw = weight_.grad.reshape({channels_, 1});
    Array gb = bias_.grad.reshape({channels_, 1});
    assign(gw, Expr(gw) + sum_g_xhat, writes());
    assign(gb, Expr(gb) + sum_g, writes());
  }
  assign(grad_x,
         scale * (Expr(g) - Expr(sum_g) * (1.0 / m) - Expr(x_hat_) * sum_g_xhat * (1.0 / m)),
         writes());
  x_hat_ = Array();
  inv_std_ = Array();
  return grad_x.reshape(input_shape_);
}

std::vector<Parameter*> BatchNorm::parameters() {
  if (affine_) return {&weight_, &bias_, &running_mean_, &running_var_};
  return {&running_mean_, &running_var_};
}

void BatchNorm::reset_parameters(Rng&) {
  if (affine_) {
    weight_.value = Array::ones({channels_}, DType::f32, device_);
    bias_.value = Array::zeros({channels_}, DType::f32, device_);
  }
  running_mean_.value = Array::zeros({channels_}, DType::f32, device_);
  running_var_.value = Array::ones({channels_}, DType::f32, device_);
}

void BatchNorm::to(Device device) {
  Layer::to(device);
  for (Parameter* p : parameters()) move_parameter(*p, device);
  x_hat_ = Array();
  inv_std_ = Array();
  x_ = Array();
  mu_ = Array();
  var_ = Array();
}

JsonValue BatchNorm::config() const {
  return JsonValue::object(
      {{"type", "batchnorm"},
       {"num_features", channels_},
       {"momentum", momentum_},
       {"eps", eps_},
       {"affine", affine_},
       {"statistics", "over every axis but the channel (spatial, time and batch)"}});
}

}  // namespace flexkit::nn
