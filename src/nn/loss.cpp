#include <cmath>

#include "flexkit/expr.hpp"
#include "nn/layer_support.hpp"

namespace flexkit::nn {

using namespace detail;

LossKind parse_loss(std::string_view name) {
  if (name == "ce" || name == "cross_entropy" || name == "cross-entropy")
    return LossKind::cross_entropy;
  if (name == "mse") return LossKind::mse;
  throw ValueError(cat("unknown loss '", name, "'; losses: ce (softmax cross-entropy), mse"));
}

std::string_view loss_name(LossKind kind) {
  return kind == LossKind::mse ? "mse" : "ce";
}

namespace {
double scalar(const Expr& e) {
  return static_cast<double>(evaluate(e).to_floats().at(0));
}
}  // namespace

LossResult rate_loss(const Array& output, const Array& labels, LossKind kind) {
  if (!output.defined() || output.rank() != 3)
    throw ShapeError(cat("loss: the network output must be (classes, T, N), got ",
                         output.defined() ? output.describe() : std::string("an empty handle")));
  const std::int64_t classes = output.dim(0), steps = output.dim(1), n = output.dim(2);
  if (!labels.defined() || labels.rank() != 1 || labels.dim(0) != n)
    throw ShapeError(cat("loss: labels must be [", n, "], got ",
                         labels.defined() ? labels.describe() : std::string("an empty handle")));
  if (labels.device() != output.device())
    throw DeviceError(
        cat("loss: labels on ", labels.device().str(), ", the output on ", output.device().str()));
  const Device device = output.device();
  LossResult r;
  // (classes, 1, N): broadcasts over T for the gradient.
  const Array rate = evaluate(mean(Expr(output), 1));
  const Array class_index = Array::arange(classes, DType::f32, device).reshape({classes, 1, 1});
  const Expr one_hot = eq(class_index, labels.reshape({1, 1, n}));
  // A label outside [0, classes) would match no class and give a silently wrong loss.
  if (scalar(sum(one_hot)) != static_cast<double>(n))
    throw ValueError(cat("loss: every label must be a class in [0, ", classes, ")"));
  r.grad_output = Array::empty(output.shape(), DType::f32, device);
  const double nd = static_cast<double>(n);
  if (kind == LossKind::cross_entropy) {
    const Array top = evaluate(max(Expr(rate), 0));
    const Array log_sum = evaluate(log(sum(exp(Expr(rate) - top), 0)) + top);
    // −log softmax(rate)[label], summed over the batch.
    r.loss = scalar(sum(one_hot * (Expr(log_sum) - rate))) / nd;
    assign(r.grad_output, (exp(Expr(rate) - log_sum) - one_hot) * (1.0 / (nd * steps)));
  } else {
    const double count = nd * static_cast<double>(classes);
    r.loss = scalar(sum(sqr(Expr(rate) - one_hot))) / count;
    assign(r.grad_output, (Expr(rate) - one_hot) * (2.0 / (count * steps)));
  }
  r.correct = static_cast<std::int64_t>(
      std::llround(scalar(sum(eq(argmax(Expr(rate), 0), labels.reshape({1, 1, n}))))));
  r.rate = rate.reshape({classes, n});
  return r;
}

}  // namespace flexkit::nn
