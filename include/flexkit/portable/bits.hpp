// Bit-level conversions that read the same on the host, under nvcc and under NVRTC.
#pragma once
#include "flexkit/portable/config.hpp"

namespace flexkit::portable {
FLEXKIT_INT_TYPES

FLEXKIT_HD float bits_to_float(uint32_t b) {
#if FLEXKIT_DEVICE_PASS
  return __uint_as_float(b);
#else
  return __builtin_bit_cast(float, b);
#endif
}

FLEXKIT_HD uint32_t float_to_bits(float f) {
#if FLEXKIT_DEVICE_PASS
  return __float_as_uint(f);
#else
  return __builtin_bit_cast(uint32_t, f);
#endif
}

FLEXKIT_HD double bits_to_double(uint64_t b) {
#if FLEXKIT_DEVICE_PASS
  return __longlong_as_double(static_cast<long long>(b));
#else
  return __builtin_bit_cast(double, b);
#endif
}

FLEXKIT_HD uint64_t double_to_bits(double d) {
#if FLEXKIT_DEVICE_PASS
  return static_cast<uint64_t>(__double_as_longlong(d));
#else
  return __builtin_bit_cast(uint64_t, d);
#endif
}

// 2^k as a float for k in [-126, 127] (every exponent flex16 needs), built from bits so no
// libm call and no rounding is involved.
FLEXKIT_HD float pow2f(int k) {
  return bits_to_float(static_cast<uint32_t>(k + 127) << 23);
}

// 2^k as a double for k in [-1022, 1023].
FLEXKIT_HD double pow2d(int k) {
  return bits_to_double(static_cast<uint64_t>(k + 1023) << 52);
}

// Correctly rounded double steps that no compiler fuses into an fma: the device spells each with
// its _rn intrinsic; the host library builds with -ffp-contract=off.
FLEXKIT_HD double add_rn(double a, double b) {
#if FLEXKIT_DEVICE_PASS
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
FLEXKIT_HD double mul_rn(double a, double b) {
#if FLEXKIT_DEVICE_PASS
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
FLEXKIT_HD double div_rn(double a, double b) {
#if FLEXKIT_DEVICE_PASS
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
FLEXKIT_HD double sqrt_rn(double a) {
#if FLEXKIT_DEVICE_PASS
  return __dsqrt_rn(a);
#else
  return __builtin_sqrt(a);
#endif
}

// Round half to even; the device and host spellings of the same IEEE operation.
FLEXKIT_HD float round_half_even(float x) {
#if FLEXKIT_DEVICE_PASS
  return rintf(x);
#else
  return __builtin_rintf(x);
#endif
}

FLEXKIT_HD double round_half_even(double x) {
#if FLEXKIT_DEVICE_PASS
  return rint(x);
#else
  return __builtin_rint(x);
#endif
}

FLEXKIT_HD double floor_d(double x) {
#if FLEXKIT_DEVICE_PASS
  return floor(x);
#else
  return __builtin_floor(x);
#endif
}

FLEXKIT_HD bool is_nan(float x) {
  return x != x;
}

// bfloat16 is the top half of a float32; float -> bf16 rounds half to even and keeps NaN a NaN.
FLEXKIT_HD uint16_t float_to_bf16_bits(float f) {
  uint32_t b = float_to_bits(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((b >> 16) | 0x0040u);
  b += 0x7fffu + ((b >> 16) & 1u);
  return static_cast<uint16_t>(b >> 16);
}

FLEXKIT_HD float bf16_bits_to_float(uint16_t h) {
  return bits_to_float(static_cast<uint32_t>(h) << 16);
}

// splitmix64: a counter-based generator, so element i of a stochastic rounding depends only on
// (seed, i) — identical on every backend, thread count and launch shape.
FLEXKIT_HD uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Uniform in [0, 1) with 32 random bits, from (seed, mix64(index)): a caller drawing for several
// seeds at one index mixes the index once.
FLEXKIT_HD double uniform01_mixed(uint64_t seed, uint64_t mixed_index) {
  uint64_t h = mix64(seed ^ mixed_index);
  return static_cast<double>(static_cast<uint32_t>(h >> 32)) * 2.3283064365386963e-10;  // 2^-32
}

// Uniform in [0, 1) with 32 random bits, from (seed, index).
FLEXKIT_HD double uniform01(uint64_t seed, uint64_t index) {
  return uniform01_mixed(seed, mix64(index));
}

}  // namespace flexkit::portable
