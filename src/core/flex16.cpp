#include "flexkit/flex16.hpp"

#include <cmath>
#include <cstdlib>

#include "core/text.hpp"
#include "flexkit/error.hpp"

namespace flexkit {
namespace {

template <class T>
void require_finite(std::span<const T> x, const char* operation) {
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i]))
      throw ValueError(detail::cat(operation, ": element ", i, " of ", x.size(), " is ", x[i],
                                   "; flex16 holds finite values only"));
  }
}

template <class T>
int choose_iwl(std::span<const T> x, const char* operation) {
  require_finite(x, operation);
  T max_abs = 0;
  for (T v : x) max_abs = std::max(max_abs, std::abs(v));
  if (max_abs == 0) return 0;
  // frexp: max_abs = f * 2^e with f in [0.5, 1), so floor(log2(max_abs)) + 1 == e exactly.
  int e = 0;
  std::frexp(max_abs, &e);
  return portable::clamp_iwl(e);
}

template <class T>
Flex16Encoded encode(std::span<const T> x, const Flex16EncodeOptions& options) {
  require_finite(x, "flex16_encode");
  Flex16Encoded out;
  out.iwl = options.iwl ? *options.iwl : choose_iwl(x, "flex16_encode");
  check_iwl(out.iwl, "flex16_encode");
  out.m.resize(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    portable::Flex16Code c = options.rounding == Rounding::stochastic
                                 ? portable::flex16_encode_stochastic(static_cast<double>(x[i]),
                                                                      out.iwl, options.seed, i)
                                 : portable::flex16_encode(x[i], out.iwl);
    out.m[i] = c.m;
    out.stats.saturated += c.saturated;
    out.stats.max_abs_m = std::max<int32_t>(out.stats.max_abs_m, std::abs(int32_t{c.m}));
  }
  return out;
}

}  // namespace

void check_iwl(int iwl, const char* operation) {
  if (iwl < kFlex16MinIwl || iwl > kFlex16MaxIwl)
    throw ValueError(detail::cat(operation, ": iwl ", iwl, " is outside [", kFlex16MinIwl, ", ",
                                 kFlex16MaxIwl, "]"));
}

int flex16_choose_iwl(std::span<const float> x) {
  return choose_iwl(x, "flex16_choose_iwl");
}
int flex16_choose_iwl(std::span<const double> x) {
  return choose_iwl(x, "flex16_choose_iwl");
}

Flex16Encoded flex16_encode(std::span<const float> x, const Flex16EncodeOptions& options) {
  return encode(x, options);
}
Flex16Encoded flex16_encode(std::span<const double> x, const Flex16EncodeOptions& options) {
  return encode(x, options);
}

std::vector<float> flex16_decode(std::span<const std::int16_t> m, int iwl) {
  check_iwl(iwl, "flex16_decode");
  std::vector<float> out(m.size());
  for (std::size_t i = 0; i < m.size(); ++i) out[i] = portable::flex16_decode(m[i], iwl);
  return out;
}

}  // namespace flexkit
