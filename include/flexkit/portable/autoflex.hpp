// Autoflex: the exponent manager of one flex16 tensor. It keeps a short history of the maxima
// the tensor's writes recorded and predicts the iwl of the next write, so that overflow is rare
// and precision is not wasted (after the Flexpoint paper's Algorithm 2). One definition for the
// host, nvcc and NVRTC: a manager updated on the device agrees with one updated on the host bit
// for bit, because every step is an integer operation or one correctly rounded double operation
// (no contraction: the device side spells each one with its _rn intrinsic).
//
// The rule, write by write:
//   - the first write has no history: it takes the finest iwl that holds it (the `exact` policy);
//   - the second write keeps that iwl. (The paper's prediction from one maximum would already
//     double the range; the observable behaviour pinned for flexkit — `y = x + 1.5` for
//     x = 0, 1, 2, 3 reads back 1.5, 1.99993896484375, 3.5, 4.5 — has the second write saturate
//     at the first one's range. This is the one place where the two differ.)
//   - a write that saturated clears the window and widens the next range kAutoflexOverflowWiden
//     binades (4x), whatever the prediction;
//   - otherwise the write's maximum joins the window of the last kAutoflexWindow maxima, and the
//     next iwl is the smallest whose range reaches
//         kAutoflexHeadroom * (window max + kAutoflexSigmas * window std)
//           + kAutoflexAdditiveUnits * 2^(iwl - 15)       (units of the write's own scale),
//     i.e. that sum rounded up to a power of two. Steady values so settle on the finest iwl this
//     headroom allows and never saturate; a window of zeros keeps the iwl (nothing was learned,
//     and the additive term alone would walk the exponent down by 8 binades a write).
//   - predictions are clamped to the legal iwl range [-111, 127], and each clamp is counted.
#pragma once
#include "flexkit/portable/bits.hpp"
#include "flexkit/portable/flex16_codec.hpp"

namespace flexkit::portable {
FLEXKIT_INT_TYPES

// Every constant of the rule, in one place.
inline constexpr int kAutoflexWindow = 16;          // maxima the prediction looks back on
inline constexpr int kAutoflexSigmas = 3;           // standard deviations above the window max
inline constexpr int kAutoflexHeadroom = 2;         // multiplicative headroom on that
inline constexpr int kAutoflexAdditiveUnits = 100;  // plus this many units of the current scale
inline constexpr int kAutoflexOverflowWiden = 2;    // binades added after a saturating write

// The manager's whole state: plain data, copied as bytes between host and device.
struct AutoflexState {
  int32_t iwl;        // the iwl the next write uses (after the first)
  int32_t writes;     // writes recorded; 0: the next write takes the exact iwl
  int32_t count;      // maxima in the window
  int32_t head;       // where the next maximum goes in the ring
  int32_t overflows;  // writes that saturated
  int32_t clamped;    // predictions clamped to the legal iwl range
  int32_t min_iwl;    // the range of iwls the writes used
  int32_t max_iwl;
  uint64_t saturated;             // values saturated, over all writes
  uint64_t nan_count;             // NaN values stored as 0, over all writes
  float window[kAutoflexWindow];  // recorded max |value|: m * 2^(iwl - 15) is exact in float
};

FLEXKIT_HD AutoflexState autoflex_initial() {
  AutoflexState s{};
  s.min_iwl = kFlex16MaxIwl;
  s.max_iwl = kFlex16MinIwl;
  return s;
}

// The smallest k with 2^k >= p, for a positive normal double.
FLEXKIT_HD int32_t autoflex_ceil_log2(double p) {
  const uint64_t bits = double_to_bits(p);
  const int32_t e = static_cast<int32_t>((bits >> 52) & 0x7ff) - 1023;
  return (bits & ((uint64_t{1} << 52) - 1)) != 0 ? e + 1 : e;
}

// The iwl the next write uses: the exact one for a first write is the caller's to find.
FLEXKIT_HD bool autoflex_wants_exact(const AutoflexState& s) {
  return s.writes == 0;
}

// Records one write: the iwl it used, the largest |mantissa| it stored, how many values
// saturated and how many were NaN (the statistics every flex16 write already keeps).
FLEXKIT_HD void autoflex_record(AutoflexState& s, int32_t written_iwl, int32_t max_abs_m,
                                uint64_t saturated, uint64_t nan_count) {
  s.writes += 1;
  s.saturated += saturated;
  s.nan_count += nan_count;
  if (written_iwl < s.min_iwl) s.min_iwl = written_iwl;
  if (written_iwl > s.max_iwl) s.max_iwl = written_iwl;
  int32_t next = written_iwl;
  if (saturated != 0) {
    s.overflows += 1;
    s.count = 0;
    s.head = 0;
    next = written_iwl + kAutoflexOverflowWiden;
  } else {
    const double scale = pow2d(written_iwl - 15);
    s.window[s.head] = static_cast<float>(mul_rn(static_cast<double>(max_abs_m), scale));
    s.head = (s.head + 1) % kAutoflexWindow;
    if (s.count < kAutoflexWindow) s.count += 1;
    if (s.writes > 1) {
      // Mean, then the population variance about it, summed oldest first.
      const int32_t oldest = (s.head - s.count + kAutoflexWindow) % kAutoflexWindow;
      double top = 0.0, sum = 0.0;
      for (int32_t i = 0; i < s.count; ++i) {
        const double v = s.window[(oldest + i) % kAutoflexWindow];
        if (v > top) top = v;
        sum = add_rn(sum, v);
      }
      if (top > 0.0) {
        const double mean = div_rn(sum, static_cast<double>(s.count));
        double squares = 0.0;
        for (int32_t i = 0; i < s.count; ++i) {
          const double d = add_rn(s.window[(oldest + i) % kAutoflexWindow], -mean);
          squares = add_rn(squares, mul_rn(d, d));
        }
        const double sigma = sqrt_rn(div_rn(squares, static_cast<double>(s.count)));
        const double bound = add_rn(top, mul_rn(kAutoflexSigmas, sigma));
        const double predicted =
            add_rn(mul_rn(kAutoflexHeadroom, bound), mul_rn(kAutoflexAdditiveUnits, scale));
        next = autoflex_ceil_log2(predicted);
      }
    }
  }
  if (next < kFlex16MinIwl || next > kFlex16MaxIwl) s.clamped += 1;
  s.iwl = clamp_iwl(next);
}

}  // namespace flexkit::portable
