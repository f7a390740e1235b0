// The one-pass finiteness check of many arrays (what the training step log records per
// parameter): against std::isfinite over every element, for f32 and bf16 arrays of sizes that
// leave partial words and blocks, an infinity or NaN at the edges, more arrays than one CUDA
// launch takes, views that start off a 16-byte boundary, and flex16 (never non-finite).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "backend/finite_check.hpp"
#include "flexkit/array.hpp"
#include "flexkit/error.hpp"
#include "support/random_arrays.hpp"
#include "support/test_device.hpp"

namespace flexkit {
namespace {

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Case {
  std::int64_t n;
  DType dtype;
  std::int64_t bad_at;  // -1: every element finite
  float bad;
};

std::vector<float> values(const Case& c, unsigned seed) {
  // Large, yet finite in bf16 too.
  std::vector<float> v = test::uniform_values(static_cast<std::size_t>(c.n), seed, -1e30f, 1e30f);
  if (c.bad_at >= 0) v[static_cast<std::size_t>(c.bad_at)] = c.bad;
  return v;
}

// The reference: the host's own test of the values the array holds.
float expected(const Array& a) {
  for (double v : a.to_doubles())
    if (!std::isfinite(v)) return kNaN;
  return 0.0f;
}

void check(const std::vector<Array>& arrays) {
  const auto count = static_cast<std::int64_t>(arrays.size());
  // The results start as garbage: the check must write every one of them.
  const Array out = Array::full({count}, 7.0f, DType::f32, test::device());
  ASSERT_TRUE(backend::finite_checkable(arrays, out));
  backend::record_finite(arrays, out);
  const std::vector<double> got = out.to_doubles();
  for (std::int64_t k = 0; k < count; ++k) {
    const float want = expected(arrays[static_cast<std::size_t>(k)]);
    if (std::isnan(want))
      EXPECT_TRUE(std::isnan(got[static_cast<std::size_t>(k)])) << "array " << k;
    else
      EXPECT_EQ(got[static_cast<std::size_t>(k)], 0.0) << "array " << k;
  }
}

TEST(FiniteCheck, EveryPlaceOfAnInfinityOrNaN) {
  std::vector<Case> cases;
  for (DType dtype : {DType::f32, DType::bf16})
    for (std::int64_t n : {std::int64_t{1}, std::int64_t{3}, std::int64_t{8}, std::int64_t{1001},
                           std::int64_t{(1 << 20) + 5}})
      for (std::int64_t at : {std::int64_t{-1}, std::int64_t{0}, n / 2, n - 1})
        for (float bad : {kInf, -kInf, kNaN}) cases.push_back({n, dtype, at, bad});
  // One array at a time, then all of them in one call (several launches on CUDA).
  std::vector<Array> all;
  unsigned seed = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << dtype_name(c.dtype) << " n " << c.n << " at " << c.bad_at
                                      << " value " << c.bad);
    const std::vector<float> v = values(c, seed++);
    all.push_back(Array::from_floats(v, {c.n}, c.dtype, test::device()));
    check({all.back()});
  }
  ASSERT_GT(all.size(), 64u);
  check(all);
}

TEST(FiniteCheck, ViewsOffTheWordBoundaryAndFlex16) {
  std::vector<float> v = values({4099, DType::f32, 4097, kNaN}, 3);
  const Array base = Array::from_floats(v, {4099}, DType::f32, test::device());
  // Starting one element in: 4-byte aligned, not 16; the NaN inside, then cut off.
  check({base(slice(1, 4099)), base(slice(1, 4097)), base(slice(4097, 4098))});
  std::vector<float> w = values({2000, DType::bf16, 1999, -kInf}, 4);
  const Array halves = Array::from_floats(w, {2000}, DType::bf16, test::device());
  check({halves(slice(2, 2000)), halves(slice(2, 1999))});
  // A bf16 view off a 4-byte boundary is not checked in one pass (the caller falls back).
  const Array out1 = Array::zeros({1}, DType::f32, test::device());
  EXPECT_FALSE(backend::finite_checkable({halves(slice(1, 2000))}, out1));
  // flex16 holds no infinity or NaN: always 0, next to arrays that do hold one.
  std::vector<float> f = values({100, DType::f32, -1, 0}, 5);
  for (float& x : f) x *= 1e-30f;
  const Array flex = Array::from_floats(f, {100}, DType::flex16, test::device());
  check({flex, base, flex});
}

TEST(FiniteCheck, RefusesWhatOnePassCannotCheck) {
  const Array a = Array::zeros({4, 4}, DType::f32, test::device());
  const Array out = Array::zeros({1}, DType::f32, test::device());
  EXPECT_FALSE(backend::finite_checkable({a(slice(), slice(0, 2))}, out));  // not contiguous
  EXPECT_FALSE(backend::finite_checkable({a}, Array::zeros({2}, DType::f32, test::device())));
  EXPECT_FALSE(backend::finite_checkable({Array::zeros({3}, DType::u8, test::device())}, out));
  EXPECT_THROW(backend::record_finite({a(slice(), slice(0, 2))}, out), ValueError);
  EXPECT_TRUE(backend::finite_checkable({}, Array::zeros({0}, DType::f32, test::device())));
}

}  // namespace
}  // namespace flexkit
