// flexkit's own exp, exp2, log and log2 (flexkit/portable/float_math.hpp): within 2 ulp of the
// float64 value over the whole float range and at the special values, and — through the
// expression kernels — the same bits on the device as on the host.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "flexkit/expr.hpp"
#include "flexkit/portable/ew_ops.hpp"
#include "flexkit/portable/float_math.hpp"
#include "support/test_device.hpp"

namespace {

using namespace flexkit;
namespace portable = flexkit::portable;

// |got - exact| in units of the last place of the float nearest exact (the subnormal ulp below).
double ulps(float got, double exact) {
  const float near = static_cast<float>(exact);
  int e = 0;
  std::frexp(near, &e);
  const double ulp = std::ldexp(1.0, std::max(e, -125) - 24);
  return std::fabs(static_cast<double>(got) - exact) / ulp;
}

std::vector<float> sample(float lo, float hi, unsigned seed, int n = 200000) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

// Positive floats spread over every binade, subnormals included.
std::vector<float> every_binade(unsigned seed, int n = 200000) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::uint32_t> bits(1, 0x7f7fffffu);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) {
    const std::uint32_t b = bits(rng);
    std::memcpy(&x, &b, sizeof x);
  }
  return v;
}

TEST(FloatMath, WithinTwoUlpOfFloat64) {
  double worst_exp = 0, worst_exp2 = 0, worst_log = 0, worst_log2 = 0;
  for (float x : sample(-103.0f, 88.7f, 1)) {
    if (std::exp(static_cast<double>(x)) < std::ldexp(1.0, -126)) continue;  // subnormal results
    worst_exp = std::max(worst_exp, ulps(portable::exp_f(x), std::exp(static_cast<double>(x))));
  }
  for (float x : sample(-126.0f, 127.9f, 2))
    worst_exp2 = std::max(worst_exp2, ulps(portable::exp2_f(x), std::exp2(static_cast<double>(x))));
  for (float x : every_binade(3)) {
    worst_log = std::max(worst_log, ulps(portable::log_f(x), std::log(static_cast<double>(x))));
    worst_log2 = std::max(worst_log2, ulps(portable::log2_f(x), std::log2(static_cast<double>(x))));
  }
  for (float x : sample(0.5f, 2.0f, 4)) {  // around 1, where log is small
    worst_log = std::max(worst_log, ulps(portable::log_f(x), std::log(static_cast<double>(x))));
    worst_log2 = std::max(worst_log2, ulps(portable::log2_f(x), std::log2(static_cast<double>(x))));
  }
  EXPECT_LE(worst_exp, 2.0);
  EXPECT_LE(worst_exp2, 2.0);
  EXPECT_LE(worst_log, 2.0);
  EXPECT_LE(worst_log2, 2.0);
}

TEST(FloatMath, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(portable::exp_f(0.0f), 1.0f);
  EXPECT_EQ(portable::exp_f(100.0f), inf);
  EXPECT_EQ(portable::exp_f(-inf), 0.0f);
  EXPECT_EQ(portable::exp_f(-110.0f), 0.0f);
  EXPECT_TRUE(std::isnan(portable::exp_f(nan)));
  EXPECT_GT(portable::exp_f(-100.0f), 0.0f);  // a subnormal
  EXPECT_NEAR(portable::exp_f(-100.0f), std::exp(-100.0), std::ldexp(1.0, -149));
  for (int k = -149; k <= 127; ++k) {
    EXPECT_EQ(portable::exp2_f(static_cast<float>(k)), std::ldexp(1.0f, k)) << k;
    EXPECT_EQ(portable::log2_f(std::ldexp(1.0f, k)), static_cast<float>(k)) << k;
  }
  EXPECT_EQ(portable::exp2_f(128.0f), inf);
  EXPECT_EQ(portable::log_f(1.0f), 0.0f);
  EXPECT_EQ(portable::log_f(0.0f), -inf);
  EXPECT_EQ(portable::log_f(-0.0f), -inf);
  EXPECT_EQ(portable::log_f(inf), inf);
  EXPECT_TRUE(std::isnan(portable::log_f(-1.0f)));
  EXPECT_TRUE(std::isnan(portable::log2_f(nan)));
}

// Through the expression kernels of the test's device: the same bits as the host functions.
TEST(FloatMath, KernelsStoreTheHostBits) {
  std::vector<float> x = sample(-20.0f, 20.0f, 5, 1 << 16);
  std::vector<float> p = every_binade(6, 1 << 16);
  // exp over its whole range: |x| <= 86 takes the short path, the rest (overflow, subnormal
  // results, zero) the general one; NaN and the infinities among them.
  std::vector<float> w = sample(-110.0f, 95.0f, 7, 1 << 16);
  w[0] = std::numeric_limits<float>::quiet_NaN();
  w[1] = std::numeric_limits<float>::infinity();
  w[2] = -std::numeric_limits<float>::infinity();
  w[3] = 86.0f;
  w[4] = std::nextafter(86.0f, 100.0f);
  w[5] = -86.0f;
  w[6] = std::nextafter(-86.0f, -100.0f);
  const auto n = static_cast<std::int64_t>(x.size());
  const Array xs = Array::from_floats(x, {n}, DType::f32, test::device());
  const Array ps = Array::from_floats(p, {n}, DType::f32, test::device());
  const Array ws = Array::from_floats(w, {n}, DType::f32, test::device());
  struct Case {
    const char* name;
    Expr e;
    float (*host)(float);
    const std::vector<float>* in;
  };
  const std::vector<Case> cases = {
      {"exp", exp(Expr(xs)), [](float v) { return portable::exp_f(v); }, &x},
      {"exp, whole range", exp(Expr(ws)), [](float v) { return portable::exp_f(v); }, &w},
      {"exp2", exp2(Expr(xs)), [](float v) { return portable::exp2_f(v); }, &x},
      {"log", log(Expr(ps)), [](float v) { return portable::log_f(v); }, &p},
      {"log2", log2(Expr(ps)), [](float v) { return portable::log2_f(v); }, &p},
      {"sig", sig(Expr(xs)), [](float v) { return portable::ew_sig(v); }, &x},
  };
  for (const Case& c : cases) {
    const std::vector<float> got = evaluate(c.e).to_floats();
    for (std::size_t i = 0; i < got.size(); ++i) {
      const float want = c.host((*c.in)[i]);
      ASSERT_EQ(std::memcmp(&got[i], &want, sizeof want), 0)
          << c.name << "(" << (*c.in)[i] << "): " << got[i] << " vs " << want;
    }
  }
}

}  // namespace
