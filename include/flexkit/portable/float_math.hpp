// exp, exp2, log and log2 in float32 from correctly rounded steps only (+, −, ×, ÷, rounding to
// an integer, bit moves), spelled so that no compiler fuses them into an fma. The C library and
// CUDA's libdevice each round these functions their own way (up to 2 ulp apart), which alone
// keeps a CPU run and a CUDA run from agreeing bit for bit; these give the same bits on the host,
// under nvcc and under NVRTC. Accuracy: within 2 ulp of the exact value (tests/test_float_math).
#pragma once
#include "flexkit/portable/bits.hpp"

namespace flexkit::portable {

FLEXKIT_HD float fadd_rn(float a, float b) {
#if FLEXKIT_DEVICE_PASS
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
FLEXKIT_HD float fsub_rn(float a, float b) {
#if FLEXKIT_DEVICE_PASS
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
FLEXKIT_HD float fmul_rn(float a, float b) {
#if FLEXKIT_DEVICE_PASS
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
FLEXKIT_HD float fdiv_rn(float a, float b) {
#if FLEXKIT_DEVICE_PASS
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

inline constexpr float kLn2Hi = 0.693145751953125f;  // 15 significant bits: k · kLn2Hi is exact
inline constexpr float kLn2Lo = 1.42860682030941723212e-6f;  // ln 2 − kLn2Hi
inline constexpr float kLog2e = 1.44269504088896340736f;

// p · 2^k for k in [−150, 128], rounding once unless the result is subnormal.
FLEXKIT_HD float scale_by_pow2(float p, int k) {
  if (k > 127) return fmul_rn(fmul_rn(p, pow2f(127)), pow2f(k - 127));
  if (k < -125) return fmul_rn(fmul_rn(p, pow2f(k + 100)), pow2f(-100));
  return fmul_rn(p, pow2f(k));
}

// e^r for |r| <= 0.35: Taylor to r^7 (truncation below 6e-9 relative), Horner order.
FLEXKIT_HD float exp_reduced(float r) {
  float p = 1.98412698412698e-4f;  // 1/7!
  p = fadd_rn(fmul_rn(p, r), 1.38888888888889e-3f);
  p = fadd_rn(fmul_rn(p, r), 8.33333333333333e-3f);
  p = fadd_rn(fmul_rn(p, r), 4.16666666666667e-2f);
  p = fadd_rn(fmul_rn(p, r), 1.66666666666667e-1f);
  p = fadd_rn(fmul_rn(p, r), 0.5f);
  p = fadd_rn(fmul_rn(p, r), 1.0f);
  return fadd_rn(fmul_rn(p, r), 1.0f);
}

// 1.5 · 2^23: y + kRoundShift rounds y (|y| < 2^22) to an integer, half to even, and holds that
// integer k in its low mantissa bits, 0x4b400000 + k.
inline constexpr float kRoundShift = 12582912.0f;

FLEXKIT_HD float exp_f(float x) {
  // |x| <= 86 (false for NaN): k = rint(x log2e) is in [-125, 125], so the result is p · 2^k
  // with 2^k a normal float. k is rounded by the shift, and 2^k's bits are the shifted sum's
  // low bits moved to the exponent field ((0x4b400000 + k + 127) << 23 wraps to (k + 127) << 23):
  // the same k, r and product as the general path below, with no conversion and no branch.
#if FLEXKIT_DEVICE_PASS
  const float magnitude = fabsf(x);
#else
  const float magnitude = __builtin_fabsf(x);
#endif
  if (magnitude <= 86.0f) {
    const float shifted = fadd_rn(fmul_rn(x, kLog2e), kRoundShift);
    const float k = fsub_rn(shifted, kRoundShift);
    const float r = fsub_rn(fsub_rn(x, fmul_rn(k, kLn2Hi)), fmul_rn(k, kLn2Lo));
    return fmul_rn(exp_reduced(r), bits_to_float((float_to_bits(shifted) + 127u) << 23));
  }
  if (is_nan(x)) return x;
  if (x > 88.72283935546875f) return bits_to_float(0x7f800000u);  // beyond FLT_MAX
  if (x < -103.97208404541016f) return 0.0f;                      // below half the least subnormal
  const float k = round_half_even(fmul_rn(x, kLog2e));
  // x − k ln 2 in two parts: the first subtraction is exact (Sterbenz), the second rounds once.
  const float r = fsub_rn(fsub_rn(x, fmul_rn(k, kLn2Hi)), fmul_rn(k, kLn2Lo));
  return scale_by_pow2(exp_reduced(r), static_cast<int>(k));
}

FLEXKIT_HD float exp2_f(float x) {
  if (is_nan(x)) return x;
  if (x >= 128.0f) return bits_to_float(0x7f800000u);
  if (x < -150.0f) return 0.0f;
  const float k = round_half_even(x);
  const float r = fsub_rn(x, k);  // exact: |x| < 2^23 here
  return scale_by_pow2(exp_reduced(fmul_rn(r, 0.693147180559945309f)), static_cast<int>(k));
}

// x = m · 2^e with m in [sqrt(1/2), sqrt(2)); returns e, sets f = m − 1 (exact) and log(1 + f)
// from the series 2 atanh(s), s = f / (2 + f), |s| <= 0.1716 (truncation below 1e-9 relative).
// x must be positive and finite.
FLEXKIT_HD int log_reduce(float x, float& log1p_f) {
  int e = 0;
  if (x < pow2f(-126)) {  // subnormal: scale into the normal range exactly
    x = fmul_rn(x, pow2f(23));
    e = -23;
  }
  const uint32_t bits = float_to_bits(x);
  e += static_cast<int>(bits >> 23) - 127;
  float m = bits_to_float((bits & 0x7fffffu) | 0x3f800000u);  // [1, 2)
  if (m > 1.41421356237309505f) {
    m = fmul_rn(m, 0.5f);
    e += 1;
  }
  const float f = fsub_rn(m, 1.0f);
  const float s = fdiv_rn(f, fadd_rn(2.0f, f));
  const float z = fmul_rn(s, s);
  float r = 0.181818181818182f;  // 2/11
  r = fadd_rn(fmul_rn(r, z), 0.222222222222222f);
  r = fadd_rn(fmul_rn(r, z), 0.285714285714286f);
  r = fadd_rn(fmul_rn(r, z), 0.4f);
  r = fmul_rn(fadd_rn(fmul_rn(r, z), 0.666666666666667f), z);
  // 2 atanh(s) = 2s + s·r and 2s = f − s·f, so log(1 + f) = f − s·(f − r).
  log1p_f = fsub_rn(f, fmul_rn(s, fsub_rn(f, r)));
  return e;
}

// log's and log2's special values: NaN for NaN and x < 0, −inf for ±0, inf for inf.
FLEXKIT_HD bool log_special(float x, float& out) {
  if (is_nan(x) || x < 0.0f) {
    out = bits_to_float(0x7fc00000u);
    return true;
  }
  if (x == 0.0f) {
    out = bits_to_float(0xff800000u);
    return true;
  }
  if (x == bits_to_float(0x7f800000u)) {
    out = x;
    return true;
  }
  return false;
}

FLEXKIT_HD float log_f(float x) {
  float out;
  if (log_special(x, out)) return out;
  float l;
  const float e = static_cast<float>(log_reduce(x, l));
  return fadd_rn(fmul_rn(e, kLn2Hi), fadd_rn(l, fmul_rn(e, kLn2Lo)));
}

FLEXKIT_HD float log2_f(float x) {
  float out;
  if (log_special(x, out)) return out;
  float l;
  const float e = static_cast<float>(log_reduce(x, l));
  return fadd_rn(e, fmul_rn(l, kLog2e));  // exactly e for powers of two
}

}  // namespace flexkit::portable
