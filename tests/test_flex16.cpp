// The flex16 host codec against flex16's (docs/flex16.md) values and an independent
// double-precision reference.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "flexkit/flexkit.hpp"

namespace flexkit {
namespace {

// Independent reference: the exact mantissa of x at iwl by long division in double, with
// ties to even decided by comparing the remainder, then clamping.
long reference_mantissa(double x, int iwl, bool* saturated) {
  double scaled = std::ldexp(x, 15 - iwl);
  double lo = std::floor(scaled);
  double frac = scaled - lo;
  long m = static_cast<long>(lo);
  if (frac > 0.5 || (frac == 0.5 && (m % 2 != 0))) ++m;
  *saturated = m > 32767 || m < -32768;
  return std::clamp<long>(m, -32768, 32767);
}

TEST(Flex16Codec, SpecExamplePicksIwlAndMantissas) {
  std::vector<float> x = {0.5f, -0.25f, 1.0f};
  Flex16Encoded e = flex16_encode(x);
  EXPECT_EQ(e.iwl, 1);
  EXPECT_EQ(e.m, (std::vector<std::int16_t>{8192, -4096, 16384}));
  EXPECT_EQ(e.stats.saturated, 0u);
  EXPECT_EQ(e.stats.max_abs_m, 16384);
}

TEST(Flex16Codec, PointOneRoundsHalfEvenAtIwlMinus3) {
  std::vector<float> x = {0.1f};
  Flex16Encoded e = flex16_encode(x);
  EXPECT_EQ(e.iwl, -3);
  EXPECT_EQ(e.m[0], 26214);
}

TEST(Flex16Codec, PointFourAtFixedIwls) {
  std::vector<float> x = {0.4f, -0.4f};
  Flex16Encoded at0 = flex16_encode(x, {.iwl = 0});
  EXPECT_EQ(at0.m[0], 13107);
  EXPECT_EQ(flex16_decode(at0.m, 0)[0], 0.399993896484375f);
  Flex16Encoded at1 = flex16_encode(x, {.iwl = 1});
  EXPECT_EQ(at1.m[0], 6554);
  EXPECT_EQ(at1.m[1], -6554);
}

TEST(Flex16Codec, SaturationIsClampedAndCounted) {
  std::vector<float> x = {2.0f, -3.0f, 1.0f, -2.0f};
  Flex16Encoded e = flex16_encode(x, {.iwl = 1});
  EXPECT_EQ(e.m[0], 32767);
  EXPECT_EQ(e.m[1], -32768);
  EXPECT_EQ(e.m[2], 16384);
  EXPECT_EQ(e.m[3], -32768);  // -2.0 is exactly representable at iwl 1
  EXPECT_EQ(e.stats.saturated, 2u);
  EXPECT_EQ(e.stats.max_abs_m, 32768);
}

TEST(Flex16Codec, AllZeroGetsIwlZero) {
  std::vector<float> x(5, 0.0f);
  Flex16Encoded e = flex16_encode(x);
  EXPECT_EQ(e.iwl, 0);
  EXPECT_EQ(e.stats.max_abs_m, 0);
  std::vector<float> none;
  EXPECT_EQ(flex16_encode(none).iwl, 0);
}

TEST(Flex16Codec, NonFiniteIsRejectedNamingTheElement) {
  std::vector<float> x = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  try {
    flex16_encode(x);
    FAIL() << "NaN was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("element 1"), std::string::npos) << e.what();
  }
  std::vector<double> inf = {std::numeric_limits<double>::infinity()};
  EXPECT_THROW(flex16_encode(inf), std::invalid_argument);
  EXPECT_THROW(flex16_choose_iwl(std::span<const double>(inf)), ValueError);
}

TEST(Flex16Codec, ChosenIwlIsTheSmallestHoldingTheMaximum) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> exponent(-100, 100), mant(0.5, 1.0);
  for (int i = 0; i < 2000; ++i) {
    float v = static_cast<float>(std::ldexp(mant(rng), static_cast<int>(exponent(rng))));
    std::vector<float> x = {v, -v / 3};
    int iwl = flex16_choose_iwl(x);
    ASSERT_LT(v, std::ldexp(1.0, iwl)) << v;
    ASSERT_GE(v, std::ldexp(1.0, iwl - 1)) << v;
  }
  // Exact powers of two need the next exponent: 1.0 < 2^1.
  std::vector<float> one = {1.0f};
  EXPECT_EQ(flex16_choose_iwl(one), 1);
  // Subnormal maxima clamp to the smallest legal iwl.
  std::vector<float> tiny = {1e-42f};
  EXPECT_EQ(flex16_choose_iwl(tiny), kFlex16MinIwl);
}

TEST(Flex16Codec, MatchesIndependentReferenceAtEveryIwl) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(-1.5, 1.5);
  for (int iwl : {-111, -20, -3, 0, 1, 5, 15, 40, 127}) {
    std::vector<double> x(3000);
    for (double& v : x) v = u(rng) * std::ldexp(1.0, iwl);
    // Exact ties, which RNE must send to the even neighbour.
    x[0] = std::ldexp(2.5, iwl - 15);
    x[1] = std::ldexp(-3.5, iwl - 15);
    x[2] = std::ldexp(32766.5, iwl - 15);
    Flex16Encoded e = flex16_encode(std::span<const double>(x), {.iwl = iwl});
    std::uint64_t saturated = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      bool sat = false;
      ASSERT_EQ(e.m[i], reference_mantissa(x[i], iwl, &sat)) << "x=" << x[i] << " iwl=" << iwl;
      saturated += sat;
    }
    EXPECT_EQ(e.stats.saturated, saturated);
    EXPECT_EQ(e.m[0], 2);
    EXPECT_EQ(e.m[1], -4);
    EXPECT_EQ(e.m[2], 32766);
  }
}

TEST(Flex16Codec, DecodeIsExact) {
  for (int iwl : {-111, 0, 15, 127}) {
    std::vector<std::int16_t> m = {-32768, -1, 0, 1, 12345, 32767};
    std::vector<float> v = flex16_decode(m, iwl);
    for (std::size_t i = 0; i < m.size(); ++i)
      EXPECT_EQ(static_cast<double>(v[i]), std::ldexp(static_cast<double>(m[i]), iwl - 15));
  }
  std::vector<std::int16_t> m = {1};
  EXPECT_THROW(flex16_decode(m, 128), ValueError);
  EXPECT_THROW(flex16_decode(m, -112), ValueError);
}

TEST(Flex16Codec, StochasticRoundingIsUnbiasedAndReproducible) {
  // 0.3 LSB above an integer: the mean mantissa must approach k + 0.3.
  const int iwl = 0;
  const double lsb = std::ldexp(1.0, iwl - 15);
  std::vector<double> x(200000, 100.3 * lsb);
  Flex16EncodeOptions opts{.iwl = iwl, .rounding = Rounding::stochastic, .seed = 42};
  Flex16Encoded a = flex16_encode(std::span<const double>(x), opts);
  Flex16Encoded b = flex16_encode(std::span<const double>(x), opts);
  EXPECT_EQ(a.m, b.m);
  double mean = 0;
  for (auto m : a.m) {
    ASSERT_TRUE(m == 100 || m == 101) << m;
    mean += m;
  }
  mean /= static_cast<double>(a.m.size());
  EXPECT_NEAR(mean, 100.3, 0.005);  // 4.5 standard errors
  opts.seed = 43;
  EXPECT_NE(flex16_encode(std::span<const double>(x), opts).m, a.m);
  // Representable values are never perturbed.
  std::vector<double> exact = {0.5, -0.25, 100 * lsb};
  EXPECT_EQ(flex16_encode(std::span<const double>(exact), opts).m,
            (std::vector<std::int16_t>{16384, -8192, 100}));
}

TEST(BF16, RoundsToNearestEvenAndKeepsNaN) {
  using portable::bf16_bits_to_float;
  using portable::float_to_bf16_bits;
  EXPECT_EQ(float_to_bf16_bits(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125: ties to even -> 1.0.
  EXPECT_EQ(float_to_bf16_bits(1.00390625f), 0x3f80);
  // 1 + 3*2^-8 is halfway between 1.0078125 (odd) and 1.015625 (even).
  EXPECT_EQ(float_to_bf16_bits(1.01171875f), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(std::nanf("")))));
  EXPECT_EQ(bf16_bits_to_float(0xc040), -3.0f);
}

}  // namespace
}  // namespace flexkit

namespace flexkit {
namespace {

TEST(Flex16Codec, IwlHoldingAccountsForRoundingUp) {
  using portable::flex16_iwl_holding;
  EXPECT_EQ(flex16_iwl_holding(1.5f), 1);
  // 1.99999 * 2^14 = 32767.84 rounds to 32768, which needs the next exponent.
  EXPECT_EQ(flex16_iwl_holding(1.99999f), 2);
  EXPECT_EQ(flex16_iwl_holding(0.0f), 0);
  EXPECT_EQ(portable::flex16_iwl_for_max(1.99999f), 1);
}

}  // namespace
}  // namespace flexkit
