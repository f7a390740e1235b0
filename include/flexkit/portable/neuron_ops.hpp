// The two neuron-specific ops of FlexSN bodies (include/flexkit/neuron.hpp), defined once for the
// CPU interpreter and generated CUDA kernels: the spike (Heaviside) and its surrogate derivatives.
#pragma once
#include "flexkit/portable/config.hpp"
#include "flexkit/portable/ew_ops.hpp"

namespace flexkit::portable {

// Same order as snn::Surrogate.
enum SurrogateKind {
  kSurrogateSigmoid = 0,
  kSurrogateAtan = 1,
  kSurrogatePiecewiseQuadratic = 2,
  kSurrogatePiecewiseExp = 3,
  kSurrogateSoftSign = 4,
  kSurrogateSuperSpike = 5,
  kSurrogateErf = 6,
};

// Forward of spike(z): 1 where z >= 0, else 0 (NaN gives 0).
FLEXKIT_HD float ew_spike(float z) {
  return z >= 0.0f ? 1.0f : 0.0f;
}

// d spike / dz as the surrogate defines it (SpikingJelly's formulas).
FLEXKIT_HD float ew_surrogate_grad(int kind, float alpha, float z) {
  const float az = FLEXKIT_MATHF(fabs)(z);
  switch (kind) {
    case kSurrogateSigmoid: {
      // sig(u) * sig(-u) = t / (1 + t)^2 with t = exp(-|u|): no cancellation (s * (1 - s)
      // loses digits far from 0), and one exponential and one division, which the backward of
      // a bandwidth-bound kernel notices.
      const float t = exp_f(-alpha * az);
      const float d = 1.0f + t;
      return alpha * t / (d * d);
    }
    case kSurrogateAtan: {
      const float u = 1.5707963267948966f * alpha * z;
      return 0.5f * alpha / (1.0f + u * u);
    }
    case kSurrogatePiecewiseQuadratic: {
      const float g = alpha - alpha * alpha * az;
      return g > 0.0f ? g : 0.0f;
    }
    case kSurrogatePiecewiseExp:
      return 0.5f * alpha * exp_f(-alpha * az);
    case kSurrogateSoftSign: {
      const float d = 1.0f / alpha + az;
      return 1.0f / (2.0f * alpha * d * d);
    }
    case kSurrogateSuperSpike: {
      const float d = az + 1.0f;
      return alpha / (d * d);
    }
    default: {  // kSurrogateErf
      const float u = alpha * z;
      return alpha * 0.5641895835477563f * exp_f(-u * u);
    }
  }
}

// The gradient a max pool hands tap `self` of a window of `count` taps (values taps[0..count)):
// all of the window's gradient g where that tap holds the window's maximum and no earlier tap
// holds it, else 0 (PyTorch's rule; a window of NaNs passes nothing). Computed the way the pool's
// own backward does: the maximum first, then equality with it. The CPU interpreter's rule; the
// CUDA kernels apply it to four lanes' spike bytes at once (first_max_bytes in
// rtc/flexkit/neuron_kernels.cuh), with the same results for u8 taps.
FLEXKIT_HD float pool_first_max_gradient(const float* taps, int count, int self, float g) {
  float top = taps[0];
  for (int u = 1; u < count; ++u) top = ew_maximum(top, taps[u]);
  bool earlier = false, first = false;
  for (int u = 0; u < count; ++u) {
    const bool holds = taps[u] == top;
    first = u == self ? holds && !earlier : first;
    earlier = earlier || holds;
  }
  return first ? g : 0.0f;
}

}  // namespace flexkit::portable
