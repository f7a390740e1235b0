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
    const Statistics stats = batch_statistics(x2);
    const Array& mu = stats.mean;
    const Array& var = stats.var;
    inv_std_ = evaluate(reciprocal(sqrt(Expr(var) + eps_)));
    x_hat_ = new_tensor("normalised", x2.shape(), x.device());
    assign(x_hat_, (Expr(x2) - mu) * inv_std_, writes());
    assign(y, affine_ ? Expr(x_hat_) * gamma + beta : Expr(x_hat_), writes());
    update_running(mu, var, stats.count);
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

BatchNorm::Statistics BatchNorm::batch_statistics(const Array& x2) {
  std::int64_t m = x2.dim(1);
  if (!communicator_) {
    count_ = m;
    const Array mu = evaluate(mean(Expr(x2), 1), DType::f32);
    return {mu, evaluate(mean(sqr(Expr(x2) - mu), 1), DType::f32), m};
  }
  // Two passes, as one process takes them: the global mean, then the global centred squares.
  communicator_->all_reduce_sum(&m, 1, cat(describe(), ": the batch count"));
  const double per = 1.0 / static_cast<double>(m);
  const Array sum_x =
      summed_over_processes(evaluate(sum(Expr(x2), 1), DType::f32), "the batch sums");
  const Array mu = evaluate(Expr(sum_x) * per, DType::f32);
  const Array sum_sq = summed_over_processes(evaluate(sum(sqr(Expr(x2) - mu), 1), DType::f32),
                                             "the batch's centred squares");
  count_ = m;
  return {mu, evaluate(Expr(sum_sq) * per, DType::f32), m};
}

Array BatchNorm::summed_over_processes(const Array& sums, const char* what) {
  if (!communicator_) return sums;
  std::vector<float> v = sums.to_floats();
  communicator_->all_reduce_sum(v.data(), v.size(), cat(describe(), ": ", what));
  return Array::from_floats(v, sums.shape(), DType::f32, sums.device());
}

void BatchNorm::update_running(const Array& mu, const Array& var, std::int64_t m) {
  const double unbias = static_cast<double>(m) / static_cast<double>(m - 1);
  Array rm = running_mean_.value.reshape({channels_, 1});
  Array rv = running_var_.value.reshape({channels_, 1});
  assign(rm, (1.0 - momentum_) * Expr(rm) + momentum_ * Expr(mu));
  assign(rv, (1.0 - momentum_) * Expr(rv) + (momentum_ * unbias) * Expr(var));
}

Expr BatchNorm::scaled(const Expr& inv_std) const {
  return affine_ ? inv_std * weight_.value.reshape({channels_, 1}) : inv_std;
}

void BatchNorm::add_affine_gradients(const Expr& d_weight, const Expr& d_bias) {
  if (!affine_) return;
  ensure_grad(weight_);
  ensure_grad(bias_);
  weight_.grad_zeroed = bias_.grad_zeroed = false;
  Array gw = weight_.grad.reshape({channels_, 1});
  Array gb = bias_.grad.reshape({channels_, 1});
  assign(gw, Expr(gw) + d_weight, writes());
  assign(gb, Expr(gb) + d_bias, writes());
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
  const Statistics stats = batch_statistics(x2);
  const Array mu = stats.mean;
  var_ = stats.var;
  update_running(mu, var_, stats.count);
  x_ = x2;
  mu_ = mu;
  x_hat_ = Array();
  inv_std_ = Array();
  input_shape_ = x.shape();
  const Expr inv_std = reciprocal(sqrt(Expr(var_) + eps_));
  Fold fold;
  fold.center = mu.reshape({channels_});
  fold.scale = evaluate(scaled(inv_std), DType::f32).reshape({channels_});
  fold.shift = affine_ ? bias_.value : Array::zeros({channels_}, DType::f32, x.device());
  return fold;
}

Array BatchNorm::fold_backward(const Array& grad_through_scale, const Array& sum_centered,
                               const Array& sum_g) {
  if (!x_.defined())
    throw ValueError(cat(describe(), ": fold_backward without a folded training forward"));
  const Array g = grad_through_scale.contiguous().reshape(x_.shape());
  const double m = static_cast<double>(count_);
  // This process's sums give its part of the weight and bias gradients (the data-parallel
  // exchange adds the parts); the input gradient needs the sums over every process.
  const Array sc_here = sum_centered.reshape({channels_, 1});
  const Array s_here = sum_g.reshape({channels_, 1});
  const Array sc = summed_over_processes(sc_here, "the backward's centred sums");
  const Array s = summed_over_processes(s_here, "the backward's sums");
  const Expr inv_std = reciprocal(sqrt(Expr(var_) + eps_));
  // sum(dL/dy * x_hat) = inv_std * sum(dL/dy * (x - mean)).
  const Expr sum_g_xhat = inv_std * sc;
  const Expr scale = scaled(inv_std);
  add_affine_gradients(inv_std * sc_here, Expr(s_here));
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
  const double m = static_cast<double>(count_);
  // This process's sums give its part of the weight and bias gradients; the input gradient
  // needs the sums over every process (the same ones in a run of one process).
  const Array sum_g_here = evaluate(sum(Expr(g), 1));
  const Array sum_g_xhat_here = evaluate(sum(Expr(g) * x_hat_, 1));
  const Array sum_g = summed_over_processes(sum_g_here, "the backward's sums");
  const Array sum_g_xhat =
      summed_over_processes(sum_g_xhat_here, "the backward's sums against the normalised input");
  Array grad_x = new_tensor("input gradient", g.shape(), g.device(), TensorClass::gradients);
  const Expr scale = scaled(Expr(inv_std_));
  add_affine_gradients(Expr(sum_g_xhat_here), Expr(sum_g_here));
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
  drop_saved();
}

void BatchNorm::drop_saved() {
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
