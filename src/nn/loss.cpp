#include <cmath>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "backend/rate_loss.hpp"
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

namespace {

void check_loss_operands(const Array& output, const Array& labels) {
  if (!output.defined() || output.rank() != 3)
    throw ShapeError(cat("loss: the network output must be (classes, T, N), got ",
                         output.defined() ? output.describe() : std::string("an empty handle")));
  const std::int64_t n = output.dim(2);
  if (!labels.defined() || labels.rank() != 1 || labels.dim(0) != n)
    throw ShapeError(cat("loss: labels must be [", n, "], got ",
                         labels.defined() ? labels.describe() : std::string("an empty handle")));
  if (labels.device() != output.device())
    throw DeviceError(
        cat("loss: labels on ", labels.device().str(), ", the output on ", output.device().str()));
}

// A one-element f32 slot on `device`: the given one, checked, or a fresh one.
Array scalar_slot(const Array& given, Device device, const char* what) {
  if (!given.defined()) return Array::empty({1}, DType::f32, device);
  if (given.dtype() != DType::f32 || given.size() != 1 || given.device() != device)
    throw ShapeError(cat("loss: ", what, " must be one f32 element on ", device.str(), ", got ",
                         given.describe()));
  return given.reshape({1});
}

// 0 .. classes - 1 in f32 on `device`, made once and kept: a step then copies nothing from the
// host (which a captured step could not repeat).
Array class_indices(std::int64_t classes, Device device) {
  static std::mutex mutex;
  static auto* made = new std::map<std::pair<std::int64_t, std::string>, Array>;  // never freed
  std::lock_guard<std::mutex> lock(mutex);
  Array& a = (*made)[{classes, device.str()}];
  if (!a.defined()) a = Array::arange(classes, DType::f32, device);
  return a;
}

// The fused loss's code for an output dtype it reads as stored; none for the others (i32, f64),
// which it reads converted to f32.
std::optional<std::int32_t> rate_loss_dtype(DType d) {
  switch (d) {
    case DType::f32:
      return portable::kRateF32;
    case DType::bf16:
      return portable::kRateBF16;
    case DType::flex16:
      return portable::kRateFlex16;
    case DType::u8:
      return portable::kRateU8;
    default:
      return std::nullopt;
  }
}

Expr one_hot_of(const Array& labels, std::int64_t classes, Device device) {
  const std::int64_t n = labels.dim(0);
  const Array class_index = class_indices(classes, device).reshape({classes, 1, 1});
  return eq(class_index, labels.reshape({1, 1, n}));
}

}  // namespace

DeviceLossResult rate_loss_on_device(const Array& output, const Array& labels, LossKind kind,
                                     const Array& loss, const Array& correct,
                                     std::int64_t gradient_batch) {
  check_loss_operands(output, labels);
  const std::int64_t classes = output.dim(0), steps = output.dim(1), n = output.dim(2);
  const Device device = output.device();
  DeviceLossResult r;
  r.loss = scalar_slot(loss, device, "the loss slot");
  r.correct = scalar_slot(correct, device, "the correct-count slot");
  if (gradient_batch < 0 || (gradient_batch > 0 && gradient_batch < n))
    throw ValueError(
        cat("loss: a gradient batch of ", gradient_batch, " samples cannot hold these ", n));
  const double nd = static_cast<double>(n);
  const double gd = static_cast<double>(gradient_batch > 0 ? gradient_batch : n);
  // The readout, the loss, its gradient and the count in one pass (one launch on CUDA).
  const std::optional<std::int32_t> code = rate_loss_dtype(output.dtype());
  const Array x = code ? output.contiguous() : evaluate(Expr(output), DType::f32);
  const Array label_values = labels.dtype() == DType::i32
                                 ? labels.contiguous()
                                 : evaluate(Expr(labels), DType::i32).contiguous();
  const Array rate = Array::empty({classes, 1, n}, DType::f32, device);
  r.grad_output = Array::empty(output.shape(), DType::f32, device);
  portable::RateLossArgs args{};
  args.output = x.data();
  args.labels = static_cast<const std::int32_t*>(label_values.data());
  args.grad = static_cast<float*>(r.grad_output.data());
  args.rate = static_cast<float*>(rate.data());
  args.loss = static_cast<float*>(r.loss.data());
  args.correct = static_cast<float*>(r.correct.data());
  args.classes = classes;
  args.steps = steps;
  args.n = n;
  args.output_dtype = code ? *code : portable::kRateF32;
  args.output_iwl = x.dtype() == DType::flex16 ? x.iwl() : 0;
  if (kind == LossKind::cross_entropy) {
    args.kind = portable::kRateCrossEntropy;
    args.grad_scale = static_cast<float>(1.0 / (gd * static_cast<double>(steps)));
    args.loss_scale = static_cast<float>(1.0 / nd);
  } else {
    args.kind = portable::kRateMse;
    args.grad_scale =
        static_cast<float>(2.0 / (gd * static_cast<double>(classes) * static_cast<double>(steps)));
    args.loss_scale = static_cast<float>(1.0 / (nd * static_cast<double>(classes)));
  }
  backend::run_rate_loss(args, device);
  r.rate = rate.reshape({classes, n});
  return r;
}

LossResult rate_loss(const Array& output, const Array& labels, LossKind kind) {
  check_loss_operands(output, labels);
  const std::int64_t classes = output.dim(0), n = output.dim(2);
  // A label outside [0, classes) would match no class and give a silently wrong loss.
  if (scalar(sum(one_hot_of(labels, classes, output.device()))) != static_cast<double>(n))
    throw ValueError(cat("loss: every label must be a class in [0, ", classes, ")"));
  const DeviceLossResult d = rate_loss_on_device(output, labels, kind);
  LossResult r;
  r.loss = static_cast<double>(d.loss.to_floats().at(0));
  r.correct = std::llround(d.correct.to_floats().at(0));
  r.grad_output = d.grad_output;
  r.rate = d.rate;
  return r;
}

}  // namespace flexkit::nn
