// Seeded stochastic rounding in flex16 writes (AssignOptions::rounding): every stored mantissa
// is the shared codec's flex16_encode_stochastic of the float32 value with (seed, the element's
// offset from the view's first element) — on both backends, so the bits agree — and the
// rounding is unbiased where round-to-nearest is not.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "flexkit/autoflex.hpp"
#include "flexkit/expr.hpp"
#include "support/random_arrays.hpp"
#include "support/test_device.hpp"

namespace {

using namespace flexkit;
namespace portable = flexkit::portable;

Device dev() {
  return test::device();
}

AssignOptions stochastic(std::uint64_t seed, std::optional<int> iwl = std::nullopt,
                         IwlPolicy policy = IwlPolicy::fixed) {
  AssignOptions o;
  o.iwl_policy = policy;
  o.iwl = iwl;
  o.rounding = Rounding::stochastic;
  o.seed = seed;
  return o;
}

// The mantissas of a contiguous flex16 array against the codec, element i at offset i.
void expect_codec_bits(const Array& y, const std::vector<float>& values, std::uint64_t seed) {
  const std::vector<std::int16_t> bits = y.to_vector<std::int16_t>();
  ASSERT_EQ(bits.size(), values.size());
  for (std::size_t i = 0; i < values.size(); ++i)
    ASSERT_EQ(
        bits[i],
        portable::flex16_encode_stochastic(static_cast<double>(values[i]), y.iwl(), seed, i).m)
        << "element " << i;
}

TEST(StochasticWrites, EveryMantissaIsTheCodecs) {
  // Sizes around the CUDA kernels' vector width, so both the vector and the scalar paths store.
  for (std::int64_t n : {1, 7, 64, 1000, 4099}) {
    const std::vector<float> x = test::uniform_values(static_cast<std::size_t>(n), 5, -3.0f, 3.0f);
    const Array xs = Array::from_floats(x, {n}, DType::f32, dev());
    Array y = Array::empty({n}, DType::flex16, dev());
    assign(y, Expr(xs) * 1.0, stochastic(42, 2));
    expect_codec_bits(y, x, 42);
  }
}

TEST(StochasticWrites, AStridedViewDrawsFromItsOwnOffsets) {
  // A transposed target: element (i, j) of the view sits at offset j * rows + i.
  const std::int64_t rows = 33, cols = 20;
  const std::vector<float> x =
      test::uniform_values(static_cast<std::size_t>(rows * cols), 9, -1.0f, 1.0f);
  const Array xs = Array::from_floats(x, {rows, cols}, DType::f32, dev());
  Array storage = Array::empty({cols, rows}, DType::flex16, dev());
  storage.set_iwl(0);
  Array view = storage.T();
  assign(view, Expr(xs), stochastic(7));
  const std::vector<std::int16_t> bits = storage.to_vector<std::int16_t>();
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) {
      const auto offset = static_cast<std::uint64_t>(j * rows + i);
      ASSERT_EQ(bits[offset],
                portable::flex16_encode_stochastic(
                    static_cast<double>(x[static_cast<std::size_t>(i * cols + j)]), 0, 7, offset)
                    .m)
          << i << ", " << j;
    }
}

TEST(StochasticWrites, ReductionsRoundTheirResults) {
  const std::int64_t rows = 40, cols = 300;
  const Array xs = Array::from_floats(
      test::uniform_values(static_cast<std::size_t>(rows * cols), 3, -1.0f, 1.0f), {rows, cols},
      DType::f32, dev());
  const std::vector<float> sums = evaluate(sum(Expr(xs), 1), DType::f32).to_floats();
  Array y = Array::empty({rows, 1}, DType::flex16, dev());
  assign(y, sum(Expr(xs), 1), stochastic(11, 4));
  expect_codec_bits(y, sums, 11);
  // exact picks an exponent at which rounding up cannot saturate.
  Array z = Array::empty({rows, 1}, DType::flex16, dev());
  assign(z, sum(Expr(xs), 1), stochastic(11, std::nullopt, IwlPolicy::exact));
  expect_codec_bits(z, sums, 11);
  EXPECT_EQ(z.stats().saturated, 0u);
}

TEST(StochasticWrites, SameSeedSameBitsAndNoBias) {
  // A value a quarter of a unit above a representable one: nearest always rounds down (a bias
  // of -1/4 unit); stochastic rounds up a quarter of the time.
  const std::int64_t n = 1 << 16;
  const int iwl = 0;
  const double unit = std::ldexp(1.0, iwl - 15);
  const double value = 1000.25 * unit;
  const Array xs = Array::full({n}, value, DType::f32, dev());
  Array a = Array::empty({n}, DType::flex16, dev());
  Array b = Array::empty({n}, DType::flex16, dev());
  Array c = Array::empty({n}, DType::flex16, dev());
  assign(a, Expr(xs), stochastic(1, iwl));
  assign(b, Expr(xs), stochastic(1, iwl));
  assign(c, Expr(xs), stochastic(2, iwl));
  EXPECT_EQ(a.to_vector<std::int16_t>(), b.to_vector<std::int16_t>());
  EXPECT_NE(a.to_vector<std::int16_t>(), c.to_vector<std::int16_t>());
  double mean = 0;
  for (double v : a.to_doubles()) mean += v;
  mean /= static_cast<double>(n);
  // The count of round-ups is binomial(n, 1/4): its standard deviation is 111 of 65536.
  EXPECT_NEAR((mean - value) / unit, 0.0, 0.01);
  Array nearest = Array::empty({n}, DType::flex16, dev());
  assign(nearest, Expr(xs), {.iwl = iwl});
  EXPECT_EQ(nearest.to_doubles().front(), 1000.0 * unit);
}

TEST(StochasticWrites, AutoflexAndNaNStillRecord) {
  const Array x =
      Array::from_floats(std::vector<float>{1.5f, 0.0f, -0.75f}, {3}, DType::f32, dev());
  Array y = Array::empty({3}, DType::flex16, dev());
  assign(y, Expr(x), stochastic(3, std::nullopt, IwlPolicy::autoflex));
  EXPECT_EQ(y.iwl(), 1);
  assign(y, Expr(x) / Expr(x), stochastic(4, std::nullopt, IwlPolicy::autoflex));
  EXPECT_EQ(y.stats().nan_count, 1u);
  EXPECT_EQ(y.autoflex().report().writes, 2);
}

}  // namespace
