// The arithmetic of every expression op and every load/store conversion, defined once for the
// CPU interpreter, nvcc kernels and NVRTC-generated kernels. Computation is in float32.
#pragma once
#include "flexkit/portable/bits.hpp"
#include "flexkit/portable/flex16_codec.hpp"
#include "flexkit/portable/float_math.hpp"

#if FLEXKIT_DEVICE_PASS
#define FLEXKIT_MATHF(fn) fn##f
#else
#define FLEXKIT_MATHF(fn) __builtin_##fn##f
#endif

namespace flexkit::portable {

inline constexpr float kLn2 = 0.693147180559945309f;

FLEXKIT_HD float ew_neg(float x) {
  return -x;
}
FLEXKIT_HD float ew_abs(float x) {
  return FLEXKIT_MATHF(fabs)(x);
}
FLEXKIT_HD float ew_sqr(float x) {
  return x * x;
}
FLEXKIT_HD float ew_sqrt(float x) {
  return FLEXKIT_MATHF(sqrt)(x);
}
// exp, exp2, log, log2 (and the logistic functions built on them) are flexkit's own
// (float_math.hpp), so the CPU and CUDA agree bit for bit; tanh and pow are the platform's.
FLEXKIT_HD float ew_exp(float x) {
  return exp_f(x);
}
FLEXKIT_HD float ew_exp2(float x) {
  return exp2_f(x);
}
FLEXKIT_HD float ew_log(float x) {
  return log_f(x);
}
FLEXKIT_HD float ew_log2(float x) {
  return log2_f(x);
}
// Logistic functions evaluated on the side where the exponential cannot overflow.
FLEXKIT_HD float ew_sig(float x) {
  if (x >= 0) return 1.0f / (1.0f + exp_f(-x));
  float t = exp_f(x);
  return t / (1.0f + t);
}
FLEXKIT_HD float ew_sig2(float x) {
  if (x >= 0) return 1.0f / (1.0f + exp2_f(-x));
  float t = exp2_f(x);
  return t / (1.0f + t);
}
FLEXKIT_HD float ew_tanh(float x) {
  return FLEXKIT_MATHF(tanh)(x);
}  // ±1 at large |x|
FLEXKIT_HD float ew_tanh2(float x) {
  return FLEXKIT_MATHF(tanh)(x * kLn2);
}
FLEXKIT_HD float ew_reciprocal(float x) {
  return 1.0f / x;
}
FLEXKIT_HD float ew_floor(float x) {
  return FLEXKIT_MATHF(floor)(x);
}
FLEXKIT_HD float ew_ceil(float x) {
  return FLEXKIT_MATHF(ceil)(x);
}
FLEXKIT_HD float ew_sign(float x) {
  return x > 0 ? 1.0f : (x < 0 ? -1.0f : x);
}  // keeps ±0, NaN

FLEXKIT_HD float ew_add(float a, float b) {
  return a + b;
}
FLEXKIT_HD float ew_sub(float a, float b) {
  return a - b;
}
FLEXKIT_HD float ew_mul(float a, float b) {
  return a * b;
}
FLEXKIT_HD float ew_div(float a, float b) {
  return a / b;
}
FLEXKIT_HD float ew_pow(float a, float b) {
  return FLEXKIT_MATHF(pow)(a, b);
}
FLEXKIT_HD float ew_eq(float a, float b) {
  return a == b ? 1.0f : 0.0f;
}
FLEXKIT_HD float ew_ne(float a, float b) {
  return a != b ? 1.0f : 0.0f;
}
FLEXKIT_HD float ew_lt(float a, float b) {
  return a < b ? 1.0f : 0.0f;
}
FLEXKIT_HD float ew_le(float a, float b) {
  return a <= b ? 1.0f : 0.0f;
}
FLEXKIT_HD float ew_gt(float a, float b) {
  return a > b ? 1.0f : 0.0f;
}
FLEXKIT_HD float ew_ge(float a, float b) {
  return a >= b ? 1.0f : 0.0f;
}
// NaN propagates, as in NumPy's maximum/minimum (and hence max/min reductions).
FLEXKIT_HD float ew_maximum(float a, float b) {
  return (a > b || a != a) ? a : b;
}
FLEXKIT_HD float ew_minimum(float a, float b) {
  return (a < b || a != a) ? a : b;
}
FLEXKIT_HD float ew_where(float c, float a, float b) {
  return c != 0 ? a : b;
}
FLEXKIT_HD float ew_clip(float x, float lo, float hi) {
  return ew_minimum(ew_maximum(x, lo), hi);
}

// ---- loads: every dtype to float32 --------------------------------------------------------
FLEXKIT_HD float load_f32(float v) {
  return v;
}
FLEXKIT_HD float load_f64(double v) {
  return static_cast<float>(v);
}
FLEXKIT_HD float load_bf16(uint16_t v) {
  return bf16_bits_to_float(v);
}
FLEXKIT_HD float load_flex16(int16_t m, int iwl) {
  return flex16_decode(m, iwl);
}
FLEXKIT_HD float load_u8(uint8_t v) {
  return static_cast<float>(v);
}
FLEXKIT_HD float load_i32(int32_t v) {
  return static_cast<float>(v);
}

// ---- stores: float32 to every dtype ----------------------------------------------------------
// Integer outputs truncate toward zero and saturate to the type's range; NaN stores 0.
FLEXKIT_HD uint8_t store_u8(float v) {
  if (!(v > 0)) return 0;  // negatives and NaN
  return v >= 255.0f ? 255 : static_cast<uint8_t>(v);
}
FLEXKIT_HD int32_t store_i32(float v) {
  if (v != v) return 0;
  if (v >= 2147483648.0f) return 2147483647;
  if (v <= -2147483648.0f) return -2147483647 - 1;
  return static_cast<int32_t>(v);
}
FLEXKIT_HD uint16_t store_bf16(float v) {
  return float_to_bf16_bits(v);
}
FLEXKIT_HD double store_f64(float v) {
  return static_cast<double>(v);
}
// flex16 stores go through flex16_encode (RNE + saturation; NaN stores 0 and is counted).

}  // namespace flexkit::portable
