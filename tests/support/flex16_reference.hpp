// The docs/flex16.md rounding of an exact accumulator, written independently of the library, for
// the product tests' references. The rounding uses long double (64-bit significand: exact for the
// accumulators the tests make) and the C library's round-to-nearest-even.
#pragma once
#include <cmath>
#include <cstdint>

namespace flexkit::test {

struct RefFlex {
  std::int16_t m;
  bool saturated;
};

inline RefFlex ref_round(long double scaled) {
  long double r = std::nearbyintl(scaled);  // default mode: to nearest, ties to even
  if (r > 32767.0L) return {32767, true};
  if (r < -32768.0L) return {-32768, true};
  return {static_cast<std::int16_t>(r), false};
}

// out = alpha · acc · 2^(iwl_ab − 30) + beta · old (old in value units).
struct Ref {
  int iwl_ab = 30;
  double alpha = 1.0, beta = 0.0;
  int out_iwl = 15;
  int old_iwl = 15;  // the flex16 output's exponent before the call
};

inline RefFlex ref_flex(const Ref& r, std::int64_t acc, std::int16_t old) {
  if (r.alpha == 1.0 && r.beta == 0.0)  // exact: acc · 2^(iwl_ab − 30 + 15 − out_iwl)
    return ref_round(std::ldexp(static_cast<long double>(acc), r.iwl_ab - 15 - r.out_iwl));
  double v = r.alpha * std::ldexp(static_cast<double>(acc), r.iwl_ab - 30);
  if (r.beta != 0.0) v = v + r.beta * std::ldexp(static_cast<double>(old), r.old_iwl - 15);
  return ref_round(std::ldexp(static_cast<long double>(v), 15 - r.out_iwl));
}

}  // namespace flexkit::test
