// Edge cases of fused expressions (include/flexkit/expr.hpp): empty and size-1 extents, reductions
// whose natural initial value would be wrong, ties, NaN, integer output conversion, errors (each
// leaving the output untouched), outputs aliased with their inputs, and scalars changing between
// runs. Runs on the device given by --device; expected values are written out or computed in
// double.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "expr_reference.hpp"
#include "flexkit/flexkit.hpp"
#include "support/test_device.hpp"

namespace flexkit {
namespace {

using test::device;

constexpr float kNaNf = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

Array floats(const std::vector<float>& v, const Shape& shape) {
  return Array::from_vector(v, shape, device());
}

Array floats_as(const std::vector<float>& v, const Shape& shape, DType dtype) {
  return Array::from_floats(std::span<const float>(v), shape, dtype, device());
}

// 0, 1, 2, ... as f32 (exact up to 2^24).
Array iota(const Shape& shape, DType dtype = DType::f32) {
  return Array::arange(shape_numel(shape), dtype, device()).reshape(shape);
}

// Deterministic values in [lo, hi) without std:: distributions (their output varies by library).
std::vector<float> pseudo_random(std::size_t n, double lo, double hi, std::uint32_t seed) {
  std::vector<float> v(n);
  std::uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (float& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<float>(lo + (hi - lo) * static_cast<double>(s >> 40) * 0x1p-24);
  }
  return v;
}

// Contents as raw numbers (flex16: mantissas), for "nothing was written" checks.
std::vector<double> raw(const Array& a) {
  if (a.dtype() != DType::flex16) return a.to_doubles();
  auto m = a.to_vector<std::int16_t>();
  return std::vector<double>(m.begin(), m.end());
}

bool same_values(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
  return true;
}

// Runs `write` (tree construction included: a library may check when building or when
// assigning), expects exception type E, and checks `out` kept every element and its iwl.
template <class E>
void expect_error_and_unchanged(const Array& out, const std::function<void()>& write,
                                const std::string& what) {
  const std::vector<double> before = raw(out);
  const int iwl_before = out.dtype() == DType::flex16 ? out.iwl() : 0;
  EXPECT_THROW(write(), E) << what;
  EXPECT_TRUE(same_values(raw(out), before)) << what << ": the output was written";
  if (out.dtype() == DType::flex16) {
    EXPECT_EQ(out.iwl(), iwl_before) << what;
  }
}

// An axis outside the rank may be reported as IndexError (std::out_of_range) or as ShapeError /
// ValueError (std::invalid_argument); anything else, or nothing, fails.
void expect_bad_axis_and_unchanged(const Array& out, const std::function<void()>& write,
                                   const std::string& what) {
  const std::vector<double> before = raw(out);
  try {
    write();
    ADD_FAILURE() << what << ": no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()), "") << what;
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()), "") << what;
  }
  EXPECT_TRUE(same_values(raw(out), before)) << what << ": the output was written";
}

// ---- empty and size-1 extents -----------------------------------------------------------------

TEST(ExprEdges, EmptyArraysRunWithoutErrorAndWriteNothing) {
  Array a = Array::zeros({0, 3}, DType::f32, device());
  Array out = Array::empty({0, 3}, DType::f32, device());
  EXPECT_NO_THROW(assign(out, exp(a) * 2 + 1));
  EXPECT_NO_THROW(out = a - 1);
  EXPECT_NO_THROW(out += a);
  EXPECT_EQ(evaluate(a * 3).shape(), (Shape{0, 3}));
  // A reduction along a non-empty axis of an empty array is empty, not an error.
  Array rows = Array::empty({0, 1}, DType::f32, device());
  EXPECT_NO_THROW(assign(rows, sum(a, 1)));
  EXPECT_NO_THROW(assign(rows, argmax(a, -1)));
  // An empty view of a filled array: nothing around it may change.
  for (DType dtype : {DType::f32, DType::bf16, DType::flex16, DType::u8, DType::i32}) {
    Array base = floats_as({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {4, 3}, dtype);
    const std::vector<double> before = raw(base);
    Array empty_view = base.index("2:2");
    ASSERT_EQ(empty_view.shape(), (Shape{0, 3}));
    Array row = floats({100, 200, 300}, {3});
    EXPECT_NO_THROW(assign(empty_view, a + row)) << dtype_name(dtype);
    EXPECT_NO_THROW(empty_view = row * 2) << dtype_name(dtype);  // broadcasts to (0, 3)
    EXPECT_EQ(raw(base), before) << dtype_name(dtype);
  }
}

TEST(ExprEdges, ReductionOverAnEmptyAxisThrowsShapeError) {
  Array a = Array::zeros({0, 3}, DType::f32, device());
  Array out = floats({7, 8, 9}, {1, 3});
  Array one = floats({5}, {1, 1});
  expect_error_and_unchanged<ShapeError>(
      out, [&] { out = sum(a, 0); }, "sum over axis 0 of (0, 3)");
  expect_error_and_unchanged<ShapeError>(
      out, [&] { out = max(a, 0); }, "max over axis 0");
  expect_error_and_unchanged<ShapeError>(
      out, [&] { out = min(a, -2); }, "min over axis -2");
  expect_error_and_unchanged<ShapeError>(
      out, [&] { out = mean(a, 0); }, "mean over axis 0");
  expect_error_and_unchanged<ShapeError>(
      out, [&] { out = argmax(a, 0); }, "argmax over axis 0");
  expect_error_and_unchanged<ShapeError>(
      out, [&] { out = argmin(a, 0); }, "argmin over axis 0");
  expect_error_and_unchanged<ShapeError>(
      one, [&] { one = max(a); }, "max over all of (0, 3)");
  expect_error_and_unchanged<ShapeError>(
      one, [&] { one = sum(a); }, "sum over all of (0, 3)");
  expect_error_and_unchanged<ShapeError>(
      one, [&] { one = argmax(a); }, "argmax over all");
}

TEST(ExprEdges, SizeOneAxes) {
  Array x = floats({3, -1, 4, -1.5f, 5}, {1, 5});
  EXPECT_EQ(evaluate(sum(x, 0)).to_doubles(), x.to_doubles());
  EXPECT_EQ(evaluate(max(x, 0)).to_doubles(), x.to_doubles());
  EXPECT_EQ(evaluate(mean(x, -2)).to_doubles(), x.to_doubles());
  EXPECT_EQ(evaluate(argmax(x, 0)).to_doubles(), std::vector<double>(5, 0.0));
  EXPECT_EQ(evaluate(argmin(x.T(), 1)).to_doubles(), std::vector<double>(5, 0.0));
  EXPECT_EQ(evaluate(sum(x.T(), 1)).shape(), (Shape{5, 1}));
  Array c = iota({3, 1, 4});
  Array out = Array::zeros({3, 1, 4}, DType::f32, device());
  out = sum(c, 1) * 2;
  EXPECT_EQ(out.to_doubles(), evaluate(c * 2).to_doubles());
  // Size-1 output, rank-0 operand, rank-0 output (a (1, 1) tree drops its leading ones).
  Array single = Array::zeros({1}, DType::f32, device());
  single = floats({2.5f}, {1}) * 2;
  EXPECT_EQ(single.to_doubles(), (std::vector<double>{5}));
  Array scalar = Array::full({}, 1.5, DType::f32, device());
  Array v = Array::zeros({3}, DType::f32, device());
  v = iota({3}) + scalar;
  EXPECT_EQ(v.to_doubles(), (std::vector<double>{1.5, 2.5, 3.5}));
  Array total = Array::zeros({}, DType::f32, device());
  total = sum(iota({2, 3}));
  EXPECT_EQ(total.to_doubles(), (std::vector<double>{15}));
}

// ---- reductions whose start value or tie rule is easy to get wrong ----------------------------

TEST(ExprEdges, MaxOfNegativeRowsIsNegativeAndMinOfPositiveRowsIsPositive) {
  const Shape shape = {4, 600};  // long rows: several chunks or threads per row
  for (DType dtype : {DType::f32, DType::bf16, DType::flex16, DType::i32}) {
    std::vector<float> neg = pseudo_random(2400, -9, -1, 3);
    for (float& x : neg) x = dtype == DType::i32 ? std::floor(x) : x;
    Array a = floats_as(neg, shape, dtype);
    const std::vector<double> values = a.to_doubles();  // as stored (bf16 / flex16 rounded)
    std::vector<double> row_max(4, -1e30), row_min(4, 1e30);
    for (std::size_t i = 0; i < values.size(); ++i) {
      row_max[i / 600] = std::max(row_max[i / 600], values[i]);
      row_min[i / 600] = std::min(row_min[i / 600], -values[i]);
    }
    EXPECT_EQ(evaluate(max(a, 1)).to_doubles(), row_max) << dtype_name(dtype);
    EXPECT_EQ(evaluate(max(a)).to_doubles(),
              (std::vector<double>{*std::max_element(row_max.begin(), row_max.end())}))
        << dtype_name(dtype);
    EXPECT_EQ(evaluate(min(-a, -1)).to_doubles(), row_min) << dtype_name(dtype);
    EXPECT_EQ(evaluate(min(0 - a)).to_doubles(),
              (std::vector<double>{*std::min_element(row_min.begin(), row_min.end())}))
        << dtype_name(dtype);
  }
}

TEST(ExprEdges, ArgmaxAndArgminTiesGoToTheLowestIndex) {
  Array a = floats({3, 7, 7, 1, 5, 5, 5, 5, -2, -2, -3, -2, 0, 1, 0, 1}, {4, 4});
  EXPECT_EQ(evaluate(argmax(a, 1)).to_doubles(), (std::vector<double>{1, 0, 0, 1}));
  EXPECT_EQ(evaluate(argmin(a, 1)).to_doubles(), (std::vector<double>{3, 0, 2, 0}));
  EXPECT_EQ(evaluate(argmax(a, 0)).to_doubles(), (std::vector<double>{1, 0, 0, 1}));
  EXPECT_EQ(evaluate(argmin(a, -2)).to_doubles(), (std::vector<double>{2, 2, 2, 2}));
  EXPECT_EQ(evaluate(argmax(a)).to_doubles(), (std::vector<double>{1}));   // 7 at flat 1 and 2
  EXPECT_EQ(evaluate(argmin(a)).to_doubles(), (std::vector<double>{10}));  // -3
  // Indices count along the view: reversed, [1, 0, 1, 0] has its first 1 at position 0.
  EXPECT_EQ(evaluate(argmax(a.index("3, ::-1"), 0)).to_doubles(), (std::vector<double>{0}));
  EXPECT_EQ(evaluate(argmax(a.T(), 1)).to_doubles(), (std::vector<double>{1, 0, 0, 1}));
  // Ties far apart in long rows, where chunks or threads meet.
  const std::int64_t n = 100000;
  Array flat = Array::zeros({n}, DType::f32, device());
  EXPECT_EQ(evaluate(argmax(flat, 0)).to_doubles(), (std::vector<double>{0}));
  EXPECT_EQ(evaluate(argmin(flat)).to_doubles(), (std::vector<double>{0}));
  std::vector<float> peaks(static_cast<std::size_t>(n), 0.0f);
  peaks[90000] = peaks[70001] = peaks[5] = 3.0f;
  peaks[99999] = peaks[17] = -3.0f;
  Array p = floats(peaks, {n});
  EXPECT_EQ(evaluate(argmax(p, 0)).to_doubles(), (std::vector<double>{5}));
  EXPECT_EQ(evaluate(argmin(p)).to_doubles(), (std::vector<double>{17}));
  EXPECT_EQ(evaluate(argmax(p.index("::-1"))).to_doubles(), (std::vector<double>{n - 1 - 90000}));
  Array rows = floats(peaks, {4, n / 4});  // peaks at row 0 (5, 17), row 2 (70001), row 3 (90000)
  EXPECT_EQ(evaluate(argmax(rows, 1)).to_doubles(),
            (std::vector<double>{5, 0, 70001 - 50000, 90000 - 75000}));
}

// ---- NaN, infinities and output conversions ---------------------------------------------------

TEST(ExprEdges, NaNPropagatesThroughArithmeticAndComparesUnordered) {
  Array x = floats({kNaNf, 1, -2}, {3});
  auto got = [](const Expr& e) { return evaluate(e).to_doubles(); };
  std::vector<double> v = got(x + 1);
  EXPECT_TRUE(std::isnan(v[0]));
  EXPECT_EQ(v[1], 2);
  EXPECT_EQ(v[2], -1);
  EXPECT_TRUE(std::isnan(got(x * 2)[0]));
  EXPECT_TRUE(std::isnan(got(1 - x * x)[0]));
  EXPECT_TRUE(std::isnan(got(sum(x))[0])) << "a sum is a chain of additions";
  // Every ordered comparison with NaN is false; != is true (IEEE 754, as NumPy).
  EXPECT_EQ(got(eq(x, 1))[0], 0);
  EXPECT_EQ(got(lt(x, 1))[0], 0);
  EXPECT_EQ(got(le(x, 1))[0], 0);
  EXPECT_EQ(got(gt(x, 1))[0], 0);
  EXPECT_EQ(got(ge(x, 1))[0], 0);
  EXPECT_EQ(got(x < 1)[0], 0);
  EXPECT_EQ(got(x >= 1)[0], 0);
  EXPECT_EQ(got(eq(x, x)), (std::vector<double>{0, 1, 1}));
  EXPECT_EQ(got(ne(x, 1))[0], 1) << "NumPy: nan != 1 is True";
  // Into flex16 a NaN is stored as 0 and counted; into u8 / i32 it becomes 0.
  Array f = Array::from_flex16(std::vector<std::int16_t>{5, 5, 5}, 2, {3}, device());
  f = x + 1;
  EXPECT_EQ(f.to_vector<std::int16_t>(), (std::vector<std::int16_t>{0, 16384, -8192}));
  EXPECT_EQ(f.stats().nan_count, 1u);
  EXPECT_EQ(f.stats().saturated, 0u);
  Array u = Array::full({3}, 9, DType::u8, device());
  u = x + 1;
  EXPECT_EQ(u.to_doubles(), (std::vector<double>{0, 2, 0}));
  Array i = Array::full({3}, 9, DType::i32, device());
  i = x + 1;
  EXPECT_EQ(i.to_doubles(), (std::vector<double>{0, 2, -1}));
}

TEST(ExprEdges, TanhAndLogisticAreExactAtTheTailsAndNeverNaN) {
  const std::vector<float> big = {20, 50, 100, 1e4f, 1e30f, FLT_MAX, kInf};
  std::vector<float> x;
  for (float b : big) {
    x.push_back(b);
    x.push_back(-b);
  }
  Array a = floats(x, {static_cast<std::int64_t>(x.size())});
  const std::vector<double> t = evaluate(tanh(a)).to_doubles();
  const std::vector<double> t2 = evaluate(tanh2(a)).to_doubles();
  const std::vector<double> s = evaluate(sig(a)).to_doubles();
  const std::vector<double> s2 = evaluate(sig2(a)).to_doubles();
  // The logistic is not yet 0 or 1 at -20 (2.1e-9) or at 2^-20 from 1 for sig2(20): compare with
  // float64, with an absolute floor for float32's subnormal range (a flush to zero is fine).
  auto logistic = [](double z) { return 1.0 / (1.0 + std::exp(-z)); };
  for (std::size_t k = 0; k < x.size(); ++k) {
    const double sign = x[k] > 0 ? 1.0 : -1.0;
    EXPECT_EQ(t[k], sign) << "tanh(" << x[k] << ")";
    EXPECT_EQ(t2[k], sign) << "tanh2(" << x[k] << ")";
    const double want_s = logistic(x[k]), want_s2 = logistic(x[k] * 0.69314718055994530942);
    EXPECT_NEAR(s[k], want_s, 1e-5 * want_s + 1e-37) << "sig(" << x[k] << ")";
    EXPECT_NEAR(s2[k], want_s2, 1e-5 * want_s2 + 1e-37) << "sig2(" << x[k] << ")";
    if (std::fabs(x[k]) >= 1e4f) {
      EXPECT_EQ(s[k], x[k] > 0 ? 1.0 : 0.0) << "sig(" << x[k] << ")";
      EXPECT_EQ(s2[k], x[k] > 0 ? 1.0 : 0.0) << "sig2(" << x[k] << ")";
    }
  }
  // Around zero the odd functions stay odd and exact at 0.
  Array z = floats({0.0f, -0.0f}, {2});
  EXPECT_EQ(evaluate(tanh(z) + tanh2(z)).to_doubles(), (std::vector<double>{0, 0}));
  EXPECT_EQ(evaluate(sig(z)).to_doubles(), (std::vector<double>{0.5, 0.5}));
}

TEST(ExprEdges, IntegerOutputsTruncateTowardZeroAndSaturate) {
  const std::vector<float> x = {-3.7f,  -0.5f, 0.5f, 254.9f, 255.5f,        300,           1e10f,
                                -1e10f, kNaNf, 3e9f, -3e9f,  2147483520.0f, -2147483648.0f};
  const auto n = static_cast<std::int64_t>(x.size());
  Array a = floats(x, {n});
  Array u = Array::zeros({n}, DType::u8, device());
  u = a + 0;
  EXPECT_EQ(u.to_doubles(),
            (std::vector<double>{0, 0, 0, 254, 255, 255, 255, 0, 0, 255, 0, 255, 0}));
  Array i = Array::zeros({n}, DType::i32, device());
  i = a + 0;
  EXPECT_EQ(i.to_doubles(),
            (std::vector<double>{-3, 0, 0, 254, 255, 300, 2147483647, -2147483648.0, 0, 2147483647,
                                 -2147483648.0, 2147483520, -2147483648.0}));
}

// ---- flex16 exponent policies at the edges ----------------------------------------------------

TEST(ExprEdges, ExactPolicyOnZerosAndAtTheTopOfARange) {
  AssignOptions exact;
  exact.iwl_policy = IwlPolicy::exact;
  Array zeros = Array::from_flex16(std::vector<std::int16_t>{1, 2, 3}, 5, {3}, device());
  assign(zeros, floats({1, 2, 3}, {3}) * 0, exact);
  EXPECT_EQ(zeros.iwl(), 0) << "an all-zero result gets iwl 0";
  EXPECT_EQ(zeros.to_vector<std::int16_t>(), (std::vector<std::int16_t>{0, 0, 0}));
  // 1.99999 is below 2^1, so flex16_iwl_for_max gives 1, but at iwl 1 it rounds to mantissa 32768,
  // one past the largest. "Nothing saturates" then needs iwl 2.
  Array top = Array::zeros({2}, DType::flex16, device());
  assign(top, floats({1.99999f, -0.5f}, {2}) + 0, exact);
  const int for_max = portable::flex16_iwl_for_max(1.99999f);
  EXPECT_EQ(top.stats().saturated, 0u)
      << "exact policy picked iwl " << top.iwl() << " (flex16_iwl_for_max gives " << for_max
      << ") and saturated 1.99999";
  EXPECT_TRUE(top.iwl() == for_max || top.iwl() == for_max + 1) << top.iwl();
  EXPECT_NEAR(top.to_doubles()[0], 1.99999, std::ldexp(1.0, top.iwl() - 15));
}

TEST(ExprEdges, FixedPolicyCountsSaturationAndHonoursAnExplicitIwl) {
  Array x = floats({0.5f, 1.5f, -3, 0.25f, -0.75f, 7}, {6});
  Array f = Array::from_flex16(std::vector<std::int16_t>(6, 0), 0, {6}, device());
  f = x + 0;  // iwl 0 holds [-1, 1): 1.5, -3 and 7 saturate
  EXPECT_EQ(f.iwl(), 0);
  EXPECT_EQ(f.to_vector<std::int16_t>(),
            (std::vector<std::int16_t>{16384, 32767, -32768, 8192, -24576, 32767}));
  EXPECT_EQ(f.stats().saturated, 3u);
  EXPECT_EQ(f.stats().max_abs_m, 32768);
  AssignOptions at3;
  at3.iwl = 3;
  assign(f, x + 0, at3);
  EXPECT_EQ(f.iwl(), 3);
  EXPECT_EQ(f.to_vector<std::int16_t>(),
            (std::vector<std::int16_t>{2048, 6144, -12288, 1024, -3072, 28672}));
  EXPECT_EQ(f.stats().saturated, 0u);
}

// Large writes (many blocks on CUDA), one after another into the same array: each write's
// statistics are its own, none carried over from the write before (on CUDA the records are
// pooled, published by the last block to commit them and set back to zero).
TEST(ExprEdges, StatisticsOfLargeWritesInARowAreEachTheirOwn) {
  const std::size_t n = 3'000'000;
  std::vector<float> v = pseudo_random(n, -1.0, 1.0, 11);
  v[17] = kNaNf;
  v[n / 2] = kNaNf;
  v[n - 1] = kNaNf;
  const Array x = floats(v, {static_cast<std::int64_t>(n)});
  Array f = Array::from_flex16(std::vector<std::int16_t>(n, 0), 0, {static_cast<std::int64_t>(n)},
                               device());
  for (double scale : {0.5, 3.0, 0.25, 1.5}) {
    SCOPED_TRACE(testing::Message() << "scale " << scale);
    assign(f, Expr(x) * scale);  // the fixed policy at iwl 0: [-1, 1)
    std::uint64_t saturated = 0, nans = 0;
    int max_abs_m = 0;
    for (float value : v) {
      if (std::isnan(value)) {
        ++nans;
        continue;
      }
      // float32 arithmetic, as the kernel's, then round half to even and saturate.
      const double m =
          std::nearbyint(static_cast<double>(value * static_cast<float>(scale)) * 32768.0);
      const double stored = std::clamp(m, -32768.0, 32767.0);
      if (stored != m) ++saturated;
      max_abs_m = std::max(max_abs_m, static_cast<int>(std::abs(stored)));
    }
    const Flex16Stats stats = f.stats();
    EXPECT_EQ(stats.saturated, saturated);
    EXPECT_EQ(stats.nan_count, nans);
    EXPECT_EQ(stats.max_abs_m, max_abs_m);
  }
}

// ---- bad input: a clear exception, and the output untouched -----------------------------------

TEST(ExprEdges, BadShapesAxesAndOutputsThrowAndWriteNothing) {
  Array a = iota({3, 4});
  Array b = iota({5});
  Array out = floats(pseudo_random(12, -1, 1, 5), {3, 4});
  try {
    out = a + b;
    ADD_FAILURE() << "(3, 4) + (5,) must not broadcast";
  } catch (const ShapeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("3, 4"), std::string::npos) << "the message names the shapes: " << msg;
    EXPECT_NE(msg.find("5"), std::string::npos) << msg;
  }
  expect_error_and_unchanged<ShapeError>(
      out, [&] { out = a * b + 1; }, "(3, 4) * (5,)");
  expect_error_and_unchanged<ShapeError>(
      out, [&] { out = a.T() + 1; }, "(4, 3) into (3, 4)");
  expect_error_and_unchanged<ShapeError>(
      out,
      [&] {
        out = iota({2, 3, 4}) + 1;
      },
      "(2, 3, 4) into (3, 4)");
  expect_error_and_unchanged<ShapeError>(
      out,
      [&] {
        out = iota({3, 5}) + 1;
      },
      "(3, 5) into (3, 4)");
  Array v3 = floats({1, 2, 3}, {3});
  expect_error_and_unchanged<ShapeError>(
      v3,
      [&] {
        v3 = iota({3, 1}) + 1;
      },
      "(3, 1) into (3,): only leading size-1 axes may be dropped");
  expect_error_and_unchanged<ShapeError>(
      out, [&] { out.index(":, :2") = a + 1; }, "(3, 4) into a (3, 2) view");
  Array r3 = iota({2, 3, 4});
  Array small = floats({1, 2, 3, 4}, {1, 1, 4});
  expect_bad_axis_and_unchanged(
      small, [&] { small = sum(r3, 3); }, "sum over axis 3 of rank 3");
  expect_bad_axis_and_unchanged(
      small, [&] { small = max(r3, -4); }, "max over axis -4");
  expect_bad_axis_and_unchanged(
      small, [&] { small = argmax(r3, 7); }, "argmax over axis 7");
  expect_bad_axis_and_unchanged(
      small, [&] { small = mean(r3, -100); }, "mean over axis -100");
  // A broadcast_to view is read-only.
  Array row = floats({1, 2, 3, 4}, {1, 4});
  Array ro = row.broadcast_to({3, 4});
  expect_error_and_unchanged<ValueError>(
      row, [&] { assign(ro, a + 1); }, "write to broadcast_to");
  expect_error_and_unchanged<ValueError>(
      row, [&] { ro = a + 1; }, "write to broadcast_to (=)");
  expect_error_and_unchanged<ValueError>(
      row, [&] { ro += a; }, "write to broadcast_to (+=)");
}

TEST(ExprEdges, OperandOnAnotherDeviceThrowsDeviceError) {
  if (!device().is_cuda()) GTEST_SKIP() << "needs --device=cuda (an operand on cpu, out on cuda)";
  Array host = Array::from_vector(std::vector<float>{1, 2, 3}, {3});
  Array there = floats({4, 5, 6}, {3});
  Array out = floats({7, 8, 9}, {3});
  expect_error_and_unchanged<DeviceError>(
      out, [&] { out = host + there; }, "cpu operand");
  expect_error_and_unchanged<DeviceError>(
      out, [&] { out = sum(host) + there; }, "cpu reduction");
  Array host_out = Array::from_vector(std::vector<float>{7, 8, 9}, {3});
  expect_error_and_unchanged<DeviceError>(
      host_out, [&] { host_out = there * 2; }, "cpu out");
}

TEST(ExprEdges, F64OperandsEvaluateOrThrowDTypeError) {
  if (!device().is_cpu()) GTEST_SKIP() << "f64 arrays exist on the cpu only";
  Array d = Array::from_vector(std::vector<double>{0.1, 2.5, -3}, {3});
  Array out = floats({7, 8, 9}, {3});
  try {
    out = d * 2;
  } catch (const DTypeError&) {
    EXPECT_EQ(out.to_doubles(), (std::vector<double>{7, 8, 9}));
    return;
  }
  // Evaluated in float32: 0.1 becomes 0.1f before the product.
  EXPECT_EQ(out.to_doubles(), (std::vector<double>{static_cast<double>(0.1f * 2), 5, -6}));
}

// ---- outputs aliased with their inputs --------------------------------------------------------

// Each write either gives the right answer or throws, leaving the array as it was.
void expect_correct_or_refused(Array& a, const std::function<void()>& write,
                               const std::vector<double>& want, const std::string& what) {
  const std::vector<double> before = a.to_doubles();
  try {
    write();
  } catch (const std::exception& e) {
    EXPECT_EQ(a.to_doubles(), before) << what << " threw (" << e.what() << ") after writing";
    return;
  }
  const std::vector<double> got = a.to_doubles();
  ASSERT_EQ(got.size(), want.size()) << what;
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i] && bad++ == 0) first = i;
  EXPECT_EQ(bad, 0u) << what << ": first wrong element " << first << " is " << got[first]
                     << ", want " << want[first];
}

TEST(ExprEdges, SquareTransposeIntoItself) {
  const std::int64_t n = 70;  // more elements than one chunk of a chunked evaluator
  std::vector<double> transposed(static_cast<std::size_t>(n * n));
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < n; ++j) transposed[i * n + j] = static_cast<double>(j * n + i);
  {
    Array a = iota({n, n});
    expect_correct_or_refused(
        a, [&] { a.index("...") = a.T(); }, transposed, "A.index(\"...\") = A.T()");
  }
  {
    Array a = iota({n, n});
    expect_correct_or_refused(
        a, [&] { a.index("...") = Expr(a.T()); }, transposed, "A.index(\"...\") = Expr(A.T())");
  }
  {
    Array a = iota({n, n});
    expect_correct_or_refused(
        a, [&] { a = a.T() + 0; }, transposed, "A = A.T() + 0");
  }
  {
    Array a = iota({n, n});
    expect_correct_or_refused(
        a, [&] { assign(a, a.T() * 1 + a * 0); }, transposed, "assign(A, A.T() * 1 + A * 0)");
  }
  {
    Array f = iota({n, n}, DType::flex16);
    std::vector<double> want(transposed.size());
    const std::vector<double> old = f.to_doubles();
    for (std::size_t k = 0; k < want.size(); ++k)
      want[k] = old[static_cast<std::size_t>(transposed[k])];
    expect_correct_or_refused(
        f, [&] { f = f.T() + 0; }, want, "flex16 F = F.T() + 0");
  }
}

TEST(ExprEdges, ShiftedAndReversedViewsReadTheOldValues) {
  const std::int64_t n = 10000;
  std::vector<double> base(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) base[i] = static_cast<double>(i);
  {
    Array a = iota({n});
    std::vector<double> want = base;
    for (std::int64_t i = 1; i < n; ++i) want[i] = base[i - 1];
    expect_correct_or_refused(
        a, [&] { a.index("1:") = a.index(":-1") + 0; }, want, "a[1:] = a[:-1] + 0");
  }
  {
    Array a = iota({n});
    std::vector<double> want = base;
    for (std::int64_t i = 0; i + 1 < n; ++i) want[i] = base[i + 1];
    expect_correct_or_refused(
        a, [&] { a.index(":-1") = a.index("1:") + 0; }, want, "a[:-1] = a[1:] + 0");
  }
  {
    Array a = iota({n});
    std::vector<double> want(base.rbegin(), base.rend());
    expect_correct_or_refused(
        a, [&] { a.index("::-1") = a + 0; }, want, "a[::-1] = a + 0");
  }
  {
    Array a = iota({n});
    std::vector<double> want = base;
    for (std::int64_t i = 1; i < n; ++i) want[i] = base[i] + base[i - 1];
    expect_correct_or_refused(
        a, [&] { a.index("1:") += a.index(":-1"); }, want, "a[1:] += a[:-1]");
  }
  {
    Array m = iota({100, 30});
    std::vector<double> want = m.to_doubles();
    for (std::size_t k = 30; k < want.size(); ++k) want[k] = 2 * base[k - 30];
    expect_correct_or_refused(
        m, [&] { m.index("1:") = m.index(":-1") * 2; }, want, "M[1:] = M[:-1] * 2");
  }
}

TEST(ExprEdges, InPlaceUpdatesIncludingReductions) {
  const std::int64_t n = 5000;
  {
    Array a = iota({n});
    std::vector<double> want(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) want[i] = 3.0 * static_cast<double>(i);
    expect_correct_or_refused(
        a, [&] { a = a * 2 + a; }, want, "a = a * 2 + a");
  }
  {
    Array a = iota({n});
    std::vector<double> want(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) want[i] = 2.0 * static_cast<double>(i);
    expect_correct_or_refused(
        a, [&] { a = a * 2; }, want, "a = a * 2");
  }
  {
    // Rows minus their max: the max must come from the old rows, before any is overwritten.
    std::vector<float> v = pseudo_random(200 * 300, -10, 10, 11);
    Array m = floats(v, {200, 300});
    std::vector<double> want(v.size());
    for (std::size_t r = 0; r < 200; ++r) {
      double mx = -1e30;
      for (std::size_t c = 0; c < 300; ++c) mx = std::max(mx, static_cast<double>(v[r * 300 + c]));
      for (std::size_t c = 0; c < 300; ++c)
        want[r * 300 + c] = static_cast<double>(v[r * 300 + c] - static_cast<float>(mx));
    }
    expect_correct_or_refused(
        m, [&] { m = m - max(m, 1); }, want, "M = M - max(M, 1)");
  }
  {
    // A global reduction of the array being written: every element needs the old total.
    Array a = iota({n});
    std::vector<double> want(static_cast<std::size_t>(n));
    const double total = static_cast<double>(n) * (n - 1) / 2;  // 12497500: exact in float32
    for (std::int64_t i = 0; i < n; ++i) want[i] = static_cast<double>(i) - total;
    expect_correct_or_refused(
        a, [&] { a = a - sum(a); }, want, "a = a - sum(a)");
  }
  {
    // flex16 in place at a fixed iwl: halving is exact.
    Array f = iota({n}, DType::flex16);
    std::vector<double> want = f.to_doubles();
    for (double& w : want) w *= 0.5;
    expect_correct_or_refused(
        f, [&] { f = f * 0.5; }, want, "flex16 f = f * 0.5");
  }
}

// ---- scalars are parameters -------------------------------------------------------------------

TEST(ExprEdges, ChangingAScalarChangesTheResult) {
  Array a = iota({4, 5});
  const std::vector<double> base = a.to_doubles();
  Array out = Array::zeros({4, 5}, DType::f32, device());
  for (double s : {2.5, 7.0, 2.5, -1.25}) {
    out = a * s + 1;
    std::vector<double> want(base.size());
    for (std::size_t i = 0; i < base.size(); ++i) want[i] = base[i] * s + 1;
    EXPECT_EQ(out.to_doubles(), want) << "scalar " << s;
  }
  // The same tree object assigned twice, and += with different scalars through a view.
  const Expr tree = a * 7.0;
  Array first = Array::zeros({4, 5}, DType::f32, device());
  Array second = Array::zeros({4, 5}, DType::f32, device());
  first = tree;
  second = tree;
  EXPECT_EQ(first.to_doubles(), second.to_doubles());
  Array acc = Array::zeros({10}, DType::f32, device());
  acc.index("::2") += 2.5;
  acc.index("::2") += 7.0;
  acc.index("1::2") += 7.0;
  EXPECT_EQ(acc.to_doubles(), (std::vector<double>{9.5, 7, 9.5, 7, 9.5, 7, 9.5, 7, 9.5, 7}));
}

// ---- large and odd sizes ----------------------------------------------------------------------

TEST(ExprEdges, LargeOddSizedArraysAreWrittenCompletely) {
  const std::int64_t n = 1000003;  // a prime: no chunk or thread split divides it
  Array a = iota({n});
  Array out = Array::full({n}, -1, DType::f32, device());
  out = a * 2 + 1;
  const std::vector<double> got = out.to_doubles();
  std::int64_t bad = 0;
  for (std::int64_t i = 0; i < n; ++i)
    if (got[i] != 2.0 * static_cast<double>(i) + 1) ++bad;
  EXPECT_EQ(bad, 0);
  // A reversed, strided output of the same odd size.
  Array wide = Array::full({3 * n}, -1, DType::f32, device());
  wide.index("::-3") = a + 0;
  const std::vector<double> w = wide.to_doubles();
  bad = 0;
  for (std::int64_t k = 0; k < 3 * n; ++k) {
    const std::int64_t from_end = 3 * n - 1 - k;
    const double want = from_end % 3 == 0 ? static_cast<double>(from_end / 3) : -1.0;
    if (w[k] != want) ++bad;
  }
  EXPECT_EQ(bad, 0);
}

TEST(ExprEdges, Flex16InPlaceUpdateWhoseExponentChanges) {
  // The output's new exponent must not change how its old mantissas are read.
  std::vector<float> x = {0.5f, -0.25f, 1.0f};
  Array w = Array::from_floats(x, {3}, DType::flex16, device());  // iwl 1
  assign(w, w * 4, {.iwl_policy = IwlPolicy::exact});             // needs iwl 3
  EXPECT_EQ(w.iwl(), 3);
  EXPECT_EQ(w.to_floats(), (std::vector<float>{2.0f, -1.0f, 4.0f}));
  assign(w, w + sum(w), {.iwl = 4});  // 5 + (2, -1, 4) at an explicit iwl
  EXPECT_EQ(w.iwl(), 4);
  EXPECT_EQ(w.to_floats(), (std::vector<float>{7.0f, 4.0f, 9.0f}));
  EXPECT_EQ(w.stats().saturated, 0u);
}

}  // namespace
}  // namespace flexkit
