// The flex16 reference codec: value = m * 2^(iwl - 15), m an int16, one iwl per tensor.
// Host code, CUDA kernels and NVRTC-compiled kernels all encode through these functions, which
// is what makes flex16 results bit-identical across backends.
#pragma once
#include "flexkit/portable/bits.hpp"

namespace flexkit::portable {

inline constexpr int kFlex16MinIwl = -111;  // every value m * 2^(iwl-15) is then a normal float
inline constexpr int kFlex16MaxIwl = 127;
inline constexpr int kFlex16MaxM = 32767;
inline constexpr int kFlex16MinM = -32768;

// What one encode produced: the mantissa and whether it had to be clamped.
struct Flex16Code {
  int16_t m;
  bool saturated;
};

FLEXKIT_HD int clamp_iwl(int iwl) {
  return iwl < kFlex16MinIwl ? kFlex16MinIwl : (iwl > kFlex16MaxIwl ? kFlex16MaxIwl : iwl);
}

// Saturate an already rounded mantissa (any magnitude, inf included) to int16.
FLEXKIT_HD Flex16Code saturate_rounded(double r) {
  if (r > kFlex16MaxM) return {static_cast<int16_t>(kFlex16MaxM), true};
  if (r < kFlex16MinM) return {static_cast<int16_t>(kFlex16MinM), true};
  return {static_cast<int16_t>(r), false};
}

// float -> flex16 at `iwl`, round half to even then saturate. x * 2^(15-iwl) is exact in float
// for every legal iwl (or overflows to inf, which saturates), so one rounding happens.
// NaN encodes as 0; callers that must reject NaN check before calling.
FLEXKIT_HD Flex16Code flex16_encode(float x, int iwl) {
  if (is_nan(x)) return {0, false};
  float scaled = x * pow2f(15 - iwl);
  return saturate_rounded(static_cast<double>(round_half_even(scaled)));
}

// double -> flex16 (host references and f64 arrays): the double product is exact as well.
FLEXKIT_HD Flex16Code flex16_encode(double x, int iwl) {
  if (x != x) return {0, false};
  return saturate_rounded(round_half_even(x * pow2d(15 - iwl)));
}

// Stochastic rounding: floor(x * 2^(15-iwl) + u), u uniform in [0, 1) drawn from (seed, index),
// so the expected mantissa equals the exact scaled value and a run is reproducible.
// The same with mix64(index) given (several encodes at one index mix it once).
FLEXKIT_HD Flex16Code flex16_encode_stochastic_mixed(double x, int iwl, uint64_t seed,
                                                     uint64_t mixed_index) {
  if (x != x) return {0, false};
  double scaled = x * pow2d(15 - iwl);
  return saturate_rounded(floor_d(scaled + uniform01_mixed(seed, mixed_index)));
}

FLEXKIT_HD Flex16Code flex16_encode_stochastic(double x, int iwl, uint64_t seed, uint64_t index) {
  return flex16_encode_stochastic_mixed(x, iwl, seed, mix64(index));
}

FLEXKIT_HD float flex16_decode(int16_t m, int iwl) {
  return static_cast<float>(m) * pow2f(iwl - 15);
}

// Re-express a mantissa stored at iwl `from` at iwl `to` (RNE + saturation), as an assignment
// between two flex16 tensors of different exponents does.
FLEXKIT_HD Flex16Code flex16_rescale(int16_t m, int from, int to) {
  if (from == to) return {m, false};
  return saturate_rounded(round_half_even(static_cast<double>(m) * pow2d(from - to)));
}

// The smallest iwl whose range holds max_abs: iwl = floor(log2(max_abs)) + 1, 0 for 0,
// clamped to the legal range. Read from the float's exponent bits, so no log2 rounding issue.
FLEXKIT_HD int flex16_iwl_for_max(float max_abs) {
  if (!(max_abs > 0.0f)) return 0;
  uint32_t b = float_to_bits(max_abs) & 0x7fffffffu;
  int biased = static_cast<int>(b >> 23);
  int floor_log2;
  if (biased == 0) {  // subnormal: locate the leading mantissa bit
    floor_log2 = -127;
    for (uint32_t mant = b; mant < 0x400000u; mant <<= 1) --floor_log2;
  } else {
    floor_log2 = biased - 127;
  }
  return clamp_iwl(floor_log2 + 1);
}

// The smallest iwl at which max_abs encodes without saturating: flex16_iwl_for_max, one more
// when max_abs lies within half an LSB of the top of that range (it would round up to 2^15).
FLEXKIT_HD int flex16_iwl_holding(float max_abs) {
  int iwl = flex16_iwl_for_max(max_abs);
  if (iwl < kFlex16MaxIwl && flex16_encode(max_abs, iwl).saturated) ++iwl;
  return iwl;
}

// A flex16 writer's statistics: max |m| stored, how many values saturated, how many were NaN.
struct Flex16Stats {
  int32_t max_abs_m;
  uint64_t saturated;
  uint64_t nan_count;
};

}  // namespace flexkit::portable
