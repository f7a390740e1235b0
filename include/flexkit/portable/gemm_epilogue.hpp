// The end of an exact GEMM: what an output element becomes once its integer accumulator is
// known. The CPU and CUDA kernels both finish through these functions, so a flex16 or u8
// product is bit-identical on every backend whatever the tiling, split or thread count
// (docs/flex16.md).
//
// An accumulator `acc` is the exact sum of products of mantissas (flex16) or bytes (u8); its
// value is acc · 2^(iwl_a + iwl_b − 30), a u8 operand counting as iwl 15 (value = byte).
#pragma once
#include "flexkit/portable/flex16_codec.hpp"

namespace flexkit::portable {

enum class GemmOutKind : int32_t { flex16 = 0, f32 = 1 };

struct GemmEpilogue {
  GemmOutKind out_kind;
  // alpha == 1 and beta == 0 into flex16: the pure integer path, exact for any accumulator:
  // m = sat16(RNE(acc · 2^−scale)), scale = 15 + out_iwl − (iwl_a + iwl_b).
  bool integer_only;
  int32_t scale;
  // Otherwise r = alpha · acc · acc_unit + beta · old · old_unit in double (one product, one
  // more product, one sum, each rounded to nearest: no fused multiply-add), then
  //   flex16: m = sat16(RNE(r · 2^(15 − out_iwl))),  f32: (float)r.
  // acc_unit = 2^(iwl_a + iwl_b − 30); old_unit = 2^(old_iwl − 15) for a flex16 output, 1 for f32.
  double alpha;
  double beta;
  double acc_unit;
  double old_unit;
  double out_inv_unit;  // 2^(15 − out_iwl) for a flex16 output
  // beta == 0: the old output is never read (it may hold NaN or garbage).
  bool reads_old;
};

// acc · 2^−s rounded half to even and clamped to int16; s may be ≤ 0 (a left shift).
FLEXKIT_HD Flex16Code gemm_round_shift(int64_t acc, int32_t s) {
  if (acc == 0) return {0, false};
  if (s <= 0) {
    // Any nonzero value shifted left by 15 or more bits is out of range.
    if (s <= -16) return {static_cast<int16_t>(acc > 0 ? kFlex16MaxM : kFlex16MinM), true};
    int64_t v = acc * (int64_t(1) << (-s));  // |acc| < 2^47 is not guaranteed: check first
    int64_t limit = int64_t(1) << (62 + s);  // |acc| < 2^(62+s) keeps v inside int64
    if (acc >= limit || acc <= -limit)
      return {static_cast<int16_t>(acc > 0 ? kFlex16MaxM : kFlex16MinM), true};
    if (v > kFlex16MaxM) return {static_cast<int16_t>(kFlex16MaxM), true};
    if (v < kFlex16MinM) return {static_cast<int16_t>(kFlex16MinM), true};
    return {static_cast<int16_t>(v), false};
  }
  if (s >= 63) return {0, false};  // |acc| < 2^62 ≤ half an output unit: rounds to 0
  // Floor division by 2^s (arithmetic shift), then round half to even on the remainder.
  int64_t q = acc >> s;
  uint64_t rem = static_cast<uint64_t>(acc) & ((uint64_t(1) << s) - 1);
  uint64_t half = uint64_t(1) << (s - 1);
  if (rem > half || (rem == half && (q & 1))) ++q;
  if (q > kFlex16MaxM) return {static_cast<int16_t>(kFlex16MaxM), true};
  if (q < kFlex16MinM) return {static_cast<int16_t>(kFlex16MinM), true};
  return {static_cast<int16_t>(q), false};
}

// gemm_round_shift for 1 ≤ s ≤ 62 and |acc| < 2^62 (any sum of fewer than 2^32 products of two
// int16), without branches: the kernels' store loop. RNE(acc / 2^s) = floor((acc + 2^(s−1) − 1 +
// q₀ mod 2) / 2^s) with q₀ = floor(acc / 2^s): a remainder above half carries, below half does
// not, exactly half carries when q₀ is odd.
FLEXKIT_HD Flex16Code gemm_round_shift_right(int64_t acc, int32_t s) {
  const int64_t q = (acc + ((int64_t(1) << (s - 1)) - 1) + ((acc >> s) & 1)) >> s;
  const int64_t m = q > kFlex16MaxM ? kFlex16MaxM : q < kFlex16MinM ? kFlex16MinM : q;
  return {static_cast<int16_t>(m), m != q};
}

// Whether gemm_flex16_result of every sum of `products` products of two int16 is
// gemm_round_shift_right(acc, e.scale): the pure integer path (flex16 out, alpha 1, beta 0) with a
// right shift the branch-free form covers.
FLEXKIT_HD bool gemm_rounds_by_right_shift(const GemmEpilogue& e, int64_t products) {
  return e.integer_only && e.scale >= 1 && e.scale <= 62 && products < (int64_t(1) << 32);
}

// The same rounding for products of at most 256 terms (the shallow kernels: one to four 64-deep
// stages), unclamped, from the accumulator's three byte products: acc = 65536·hh + 256·mid + ll
// with |hh| ≤ 2^22, |mid| < 2^24, 0 ≤ ll < 2^24, and 10 ≤ s ≤ 31. With H = 256·hh + mid
// (|H| < 2^31) and L = ll + 2^(s−1) (< 2^31), T = acc + 2^(s−1) = 256·H + L and
// floor(T / 256) = U = H + floor(L / 256), so floor(T / 2^s) = floor(U / 2^(s−8)): the high word
// of U · 2^(40−s). That rounds half up; a tie (T a multiple of 2^s, seen in T mod 2^32) then
// clears bit 0, which picks the even neighbour. The result q = RNE(acc / 2^s) satisfies
// |q| < 2^29; the caller saturates it. The shift's lower bound is the multiplier's: 2^(40−s) must
// be a positive int32.
//
// On the device H, L, T and the high word are multiply-adds (IMAD, IMAD.HI) on the FMA pipe;
// U, the tie's test and its fix run on the ALU pipe. All of the rounding used to run on the
// ALU pipe, and bounded the shallow kernels' epilogue there. The multipliers come from the
// kernel's arguments at run time (`one`), so that the compiler cannot turn a multiply by a
// known power of two (or by one) back into a shift or an add on the ALU pipe.
inline constexpr int32_t kByteProductRoundingMinShift = 10;
struct ByteProductRounding {
  uint32_t one;          // 1
  uint32_t times_256;    // 256
  uint32_t half;         // 2^(s − 1)
  int32_t q_multiplier;  // 2^(40 − s)
  uint32_t tie_mask;     // 2^s − 1
};
// `one` must be 1 (on the device, a value the compiler cannot prove constant).
FLEXKIT_HD ByteProductRounding gemm_byte_product_rounding(int32_t s, uint32_t one) {
  return {one, one << 8, one << (s - 1), static_cast<int32_t>(one << (40 - s)), (one << s) - 1u};
}
// The rounding in two steps: H and L first (two independent multiply-adds, which a kernel can run
// over all its accumulators before the rest, freeing the registers of hh), then q from them.
struct CombinedByteProducts {
  uint32_t h;  // H = 256·hh + mid (the bits of an int32)
  uint32_t l;  // L = ll + 2^(s−1)
};
FLEXKIT_HD CombinedByteProducts gemm_combine_byte_products(int32_t hh, int32_t mid, int32_t ll,
                                                           const ByteProductRounding& r) {
  // (Unsigned arithmetic: the bits of the signed values, without overflow rules.)
  return {static_cast<uint32_t>(hh) * r.times_256 + static_cast<uint32_t>(mid),
          static_cast<uint32_t>(ll) * r.one + r.half};
}
FLEXKIT_HD int32_t gemm_round_combined_byte_products(CombinedByteProducts c,
                                                     const ByteProductRounding& r) {
  const int32_t u = static_cast<int32_t>(c.h + (c.l >> 8));
  const uint32_t t = c.h * r.times_256 + c.l;  // T mod 2^32
#if FLEXKIT_DEVICE_PASS
  const int32_t q = __mulhi(u, r.q_multiplier);
#else
  const int32_t q = static_cast<int32_t>((int64_t(u) * r.q_multiplier) >> 32);  // floor
#endif
  return (t & r.tie_mask) == 0 ? (q & ~int32_t(1)) : q;
}
FLEXKIT_HD int32_t gemm_round_byte_products(int32_t hh, int32_t mid, int32_t ll,
                                            const ByteProductRounding& r) {
  return gemm_round_combined_byte_products(gemm_combine_byte_products(hh, mid, ll, r), r);
}
FLEXKIT_HD int32_t gemm_round_byte_products(int32_t hh, int32_t mid, int32_t ll, int32_t s) {
  return gemm_round_byte_products(hh, mid, ll, gemm_byte_product_rounding(s, 1u));
}

// The same for an accumulator that fits in int32 (int16 × u8 products of at most 256 terms:
// |acc| ≤ 256 · 32768 · 255 < 2^31), 1 ≤ s ≤ 31, unclamped.
FLEXKIT_HD int32_t gemm_round_int32(int32_t acc, int32_t s) {
  const int32_t q0 = acc >> s;
  const uint32_t rem = static_cast<uint32_t>(acc) & ((uint32_t(1) << s) - 1u);
  return q0 + static_cast<int32_t>(
                  (rem + ((uint32_t(1) << (s - 1)) - 1u) + (static_cast<uint32_t>(q0) & 1u)) >> s);
}

// The output value before the final rounding, in double (the double path above).
FLEXKIT_HD double gemm_value(const GemmEpilogue& e, int64_t acc, double old) {
  double r = mul_rn(e.alpha, mul_rn(static_cast<double>(acc), e.acc_unit));
  if (e.reads_old) r = add_rn(r, mul_rn(e.beta, mul_rn(old, e.old_unit)));
  return r;
}

// One flex16 output element; `old_m` is the output's previous mantissa (read only when
// e.reads_old).
FLEXKIT_HD Flex16Code gemm_flex16_result(const GemmEpilogue& e, int64_t acc, int16_t old_m) {
  if (e.integer_only) return gemm_round_shift(acc, e.scale);
  double r = gemm_value(e, acc, static_cast<double>(old_m));
  if (r != r) return {0, false};
  return saturate_rounded(round_half_even(mul_rn(r, e.out_inv_unit)));
}

// One f32 output element.
FLEXKIT_HD float gemm_f32_result(const GemmEpilogue& e, int64_t acc, float old) {
  return static_cast<float>(gemm_value(e, acc, static_cast<double>(old)));
}

// What the kernels record while writing (mode store) or only measuring (mode measure, used by
// the `exact` iwl policy to pick the output exponent before the storing pass). Every field is a
// max, min or sum, so any reduction order gives the same record.
struct GemmStats {
  int32_t max_abs_m;  // store, flex16: max |m| written
  int32_t pad;
  uint64_t saturated;  // store, flex16: elements clamped to the int16 range
  int64_t acc_max;     // measure: max and min accumulator (integer_only epilogues)
  int64_t acc_min;
  uint64_t value_max_key;  // measure: max and min gemm_value as gemm_order_key (double path)
  uint64_t value_min_key;
};

// A total order on doubles as unsigned integers (a < b ⇔ key(a) < key(b) for non-NaN), so a
// device can reduce doubles with integer atomicMax/atomicMin.
FLEXKIT_HD uint64_t gemm_order_key(double x) {
  uint64_t b = double_to_bits(x);
  return (b >> 63) ? ~b : (b | (uint64_t(1) << 63));
}
FLEXKIT_HD double gemm_from_order_key(uint64_t k) {
  return bits_to_double((k >> 63) ? (k & ~(uint64_t(1) << 63)) : ~k);
}

// The neutral record: combining with it changes nothing.
FLEXKIT_HD GemmStats gemm_stats_identity() {
  GemmStats s{};
  s.max_abs_m = 0;
  s.saturated = 0;
  s.acc_max = static_cast<int64_t>(uint64_t(1) << 63);     // INT64_MIN
  s.acc_min = static_cast<int64_t>(~(uint64_t(1) << 63));  // INT64_MAX
  s.value_max_key = 0;
  s.value_min_key = ~uint64_t(0);
  return s;
}

FLEXKIT_HD void gemm_stats_merge(GemmStats& into, const GemmStats& s) {
  into.max_abs_m = into.max_abs_m > s.max_abs_m ? into.max_abs_m : s.max_abs_m;
  into.saturated += s.saturated;
  into.acc_max = into.acc_max > s.acc_max ? into.acc_max : s.acc_max;
  into.acc_min = into.acc_min < s.acc_min ? into.acc_min : s.acc_min;
  into.value_max_key = into.value_max_key > s.value_max_key ? into.value_max_key : s.value_max_key;
  into.value_min_key = into.value_min_key < s.value_min_key ? into.value_min_key : s.value_min_key;
}

// Record one element: store mode after writing `code`, measure mode before any writing.
FLEXKIT_HD void gemm_stats_store(GemmStats& s, Flex16Code code) {
  int32_t a = code.m < 0 ? -static_cast<int32_t>(code.m) : code.m;
  if (a > s.max_abs_m) s.max_abs_m = a;
  s.saturated += code.saturated ? 1 : 0;
}
FLEXKIT_HD void gemm_stats_measure(GemmStats& s, const GemmEpilogue& e, int64_t acc,
                                   int16_t old_m) {
  if (e.integer_only) {
    if (acc > s.acc_max) s.acc_max = acc;
    if (acc < s.acc_min) s.acc_min = acc;
    return;
  }
  uint64_t k = gemm_order_key(gemm_value(e, acc, static_cast<double>(old_m)));
  if (k > s.value_max_key) s.value_max_key = k;
  if (k < s.value_min_key) s.value_min_key = k;
}

}  // namespace flexkit::portable
