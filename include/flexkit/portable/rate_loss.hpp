// The rate readout and its loss in one pass (src/backend/rate_loss.hpp), shared by the CPU and
// the CUDA kernel so that both give the same bits. For a network output x of (classes, T, N):
//   rate[c, n] = mean over t of x[c, t, n]                   (summed in double, t ascending)
//   cross-entropy: top = max_c rate, lse = log(Σ_c exp(rate − top)) + top (Σ in double, c
//     ascending), the sample's loss lse − rate[label], the gradient
//     (exp(rate − lse) − onehot) · grad_scale at every t;
//   mse: the sample's loss Σ_c (rate − onehot)² (in double), the gradient
//     (rate − onehot) · grad_scale;
//   correct: argmax_c rate == label (ties keep the first class; a NaN wins, as in argmax).
// The batch's loss is the samples' losses summed in double in sample order, rounded to f32 and
// times loss_scale. A label outside [0, classes) matches no class: it adds nothing to the
// cross-entropy, every class's one-hot is 0, and it is never correct. Every f32 step is rounded
// on its own (no fused multiply-add), as the expressions the layers otherwise use.
#pragma once
#include "flexkit/portable/ew_ops.hpp"

namespace flexkit::portable {

enum RateLossDType : int32_t { kRateF32 = 0, kRateBF16 = 1, kRateFlex16 = 2, kRateU8 = 3 };
enum RateLossKind : int32_t { kRateCrossEntropy = 0, kRateMse = 1 };

struct RateLossArgs {
  const void* output;  // (classes, T, N), contiguous
  const int32_t* labels;
  float* grad;  // (classes, T, N) f32, contiguous
  float* rate;  // (classes, N) f32, contiguous
  float* loss;
  float* correct;
  int64_t classes, steps, n;
  int32_t output_dtype;
  int32_t output_iwl;  // flex16
  int32_t kind;
  float grad_scale;
  float loss_scale;
};

FLEXKIT_HD float rate_loss_load(const RateLossArgs& a, int64_t i) {
  switch (a.output_dtype) {
    case kRateF32:
      return static_cast<const float*>(a.output)[i];
    case kRateBF16:
      return load_bf16(static_cast<const uint16_t*>(a.output)[i]);
    case kRateFlex16:
      return load_flex16(static_cast<const int16_t*>(a.output)[i], a.output_iwl);
    default:
      return load_u8(static_cast<const uint8_t*>(a.output)[i]);
  }
}

// The rate of class c of sample i: the mean over t of its outputs, summed in double.
FLEXKIT_HD float rate_loss_rate(const RateLossArgs& a, int64_t c, int64_t i) {
  double s = 0.0;
  for (int64_t t = 0; t < a.steps; ++t)
    s = add_rn(s, static_cast<double>(rate_loss_load(a, (c * a.steps + t) * a.n + i)));
  return static_cast<float>(div_rn(s, static_cast<double>(a.steps)));
}

// Sample i once its rates are known (rate(c) gives class c's): writes its gradient, returns its
// loss term; `correct` receives whether its argmax is its label.
template <class Rates>
FLEXKIT_HD double rate_loss_finish(const RateLossArgs& a, int64_t i, const Rates& rate,
                                   bool& correct) {
  const int64_t n = a.n;
  float top = 0.0f, best_value = 0.0f;
  int64_t best = -1;
  for (int64_t c = 0; c < a.classes; ++c) {
    const float r = rate(c);
    top = c == 0 ? r : ew_maximum(top, r);
    const bool better = best < 0 || (best_value == best_value && (r != r || r > best_value));
    if (better) best_value = r, best = c;
  }
  const int32_t label = a.labels[i];
  const bool valid = label >= 0 && label < a.classes;
  correct = valid && best == label;
  auto onehot = [&](int64_t c) { return c == label ? 1.0f : 0.0f; };
  auto write_gradient = [&](int64_t c, float g) {
    for (int64_t t = 0; t < a.steps; ++t) a.grad[(c * a.steps + t) * n + i] = g;
  };
  if (a.kind == kRateMse) {
    double sum = 0.0;
    for (int64_t c = 0; c < a.classes; ++c) {
      const float d = fsub_rn(rate(c), onehot(c));
      sum = add_rn(sum, static_cast<double>(fmul_rn(d, d)));
      write_gradient(c, fmul_rn(d, a.grad_scale));
    }
    return sum;
  }
  double sum_exp = 0.0;
  for (int64_t c = 0; c < a.classes; ++c)
    sum_exp = add_rn(sum_exp, static_cast<double>(ew_exp(fsub_rn(rate(c), top))));
  const float lse = fadd_rn(ew_log(static_cast<float>(sum_exp)), top);
  for (int64_t c = 0; c < a.classes; ++c)
    write_gradient(c, fmul_rn(fsub_rn(ew_exp(fsub_rn(rate(c), lse)), onehot(c)), a.grad_scale));
  return valid ? static_cast<double>(fsub_rn(lse, rate(label))) : 0.0;
}

// One sample: writes its rates and gradient, returns its loss term; `correct` receives whether
// its argmax is its label.
FLEXKIT_HD double rate_loss_sample(const RateLossArgs& a, int64_t i, bool& correct) {
  for (int64_t c = 0; c < a.classes; ++c) a.rate[c * a.n + i] = rate_loss_rate(a, c, i);
  return rate_loss_finish(
      a, i, [&](int64_t c) { return a.rate[c * a.n + i]; }, correct);
}

// The batch's loss from the samples' terms summed in sample order.
FLEXKIT_HD float rate_loss_total(const RateLossArgs& a, double summed_terms) {
  return fmul_rn(static_cast<float>(summed_terms), a.loss_scale);
}

}  // namespace flexkit::portable
