// dot(): every transpose and type combination against an exact integer reference (flex16, u8)
// or a float64 reference (f32), the docs/flex16.md discriminator, long K, views, batches,
// statistics, iwl policies, and the refusals. On the cuda run, flex16 results must also equal the
// CPU's bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "flexkit/cuda.hpp"
#include "flexkit/error.hpp"
#include "flexkit/gemm.hpp"
#include "support/flex16_reference.hpp"
#include "support/integer_arrays.hpp"
#include "support/test_device.hpp"

namespace flexkit {
namespace {

using Matrix = std::vector<std::int64_t>;  // row-major integer matrix (mantissas or bytes)

// ---- an independent reference ---------------------------------------------------------------
// acc is exact in int64; the rounding is support/flex16_reference.hpp's.
std::int64_t ref_acc(const Matrix& a, const Matrix& b, std::int64_t m, std::int64_t n,
                     std::int64_t k, std::int64_t i, std::int64_t j) {
  std::int64_t acc = 0;
  for (std::int64_t p = 0; p < k; ++p) acc += a[i * k + p] * b[p * n + j];
  (void)m;
  return acc;
}

using test::flex_array;
using test::random_ints;
using test::Ref;
using test::ref_flex;
using test::RefFlex;
using test::u8_array;

float ref_f32(const Ref& r, std::int64_t acc, float old) {
  double v = r.alpha * std::ldexp(static_cast<double>(acc), r.iwl_ab - 30);
  if (r.beta != 0.0) v = v + r.beta * static_cast<double>(old);
  return static_cast<float>(v);
}

// ---- data -----------------------------------------------------------------------------------
// The logical (row-major) integer contents of a flex16 or u8 view.
Matrix ints_of(const Array& x) {
  if (x.dtype() == DType::u8) {
    auto v = x.to_vector<std::uint8_t>();
    return Matrix(v.begin(), v.end());
  }
  auto v = x.to_vector<std::int16_t>();
  return Matrix(v.begin(), v.end());
}

// A stored matrix whose view `op` (either itself or its transpose) is rows × cols.
Array stored(const Matrix& logical, std::int64_t rows, std::int64_t cols, bool transposed,
             DType dtype, int iwl, Device device) {
  if (!transposed) {
    return dtype == DType::u8 ? u8_array(logical, {rows, cols}, device)
                              : flex_array(logical, iwl, {rows, cols}, device);
  }
  Matrix t(logical.size());
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) t[j * rows + i] = logical[i * cols + j];
  Array s = dtype == DType::u8 ? u8_array(t, {cols, rows}, device)
                               : flex_array(t, iwl, {cols, rows}, device);
  return s.T();
}

Matrix random_operand(DType dtype, std::size_t count, unsigned seed) {
  return dtype == DType::u8 ? random_ints(count, 0, 255, seed)
                            : random_ints(count, -32768, 32767, seed);
}

int iwl_of(const Array& x) {
  return x.dtype() == DType::u8 ? 15 : x.iwl();
}

// Checks a flex16 or f32 result of dot(a, b) against the reference, element by element, and the
// flex16 statistics. `old` holds the output's logical contents before the call (beta != 0).
void expect_matches(const Array& a, const Array& b, const Array& out, const Ref& r,
                    const std::vector<double>& old_values, const std::string& what) {
  std::int64_t m = a.dim(0), k = a.dim(1), n = b.dim(1);
  Matrix av = ints_of(a), bv = ints_of(b);
  std::vector<std::int16_t> got_m;
  std::vector<float> got_f;
  if (out.dtype() == DType::flex16)
    got_m = out.to_vector<std::int16_t>();
  else
    got_f = out.to_vector<float>();
  std::int32_t max_abs = 0;
  std::uint64_t saturated = 0;
  int mismatches = 0;
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      std::int64_t acc = ref_acc(av, bv, m, n, k, i, j);
      std::size_t idx = static_cast<std::size_t>(i * n + j);
      double old = old_values.empty() ? 0.0 : old_values[idx];
      if (out.dtype() == DType::flex16) {
        RefFlex want = ref_flex(r, acc, static_cast<std::int16_t>(old));
        max_abs = std::max<std::int32_t>(max_abs, std::abs(static_cast<std::int32_t>(want.m)));
        saturated += want.saturated ? 1 : 0;
        if (got_m[idx] != want.m && ++mismatches <= 5)
          ADD_FAILURE() << what << ": out[" << i << "," << j << "] = " << got_m[idx]
                        << ", exact answer " << want.m << " (acc " << acc << ")";
      } else {
        float want = ref_f32(r, acc, static_cast<float>(old));
        if (got_f[idx] != want && ++mismatches <= 5)
          ADD_FAILURE() << what << ": out[" << i << "," << j << "] = " << got_f[idx]
                        << ", exact answer " << want << " (acc " << acc << ")";
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << what;
  if (out.dtype() == DType::flex16) {
    EXPECT_EQ(out.stats().max_abs_m, max_abs) << what;
    EXPECT_EQ(out.stats().saturated, saturated) << what;
    EXPECT_EQ(out.stats().nan_count, 0u) << what;
  }
}

// On the cuda run: the same call on the CPU gives the same bits.
void expect_same_as_cpu(const Array& a, const Array& b, const Array& out, const DotOptions& options,
                        const std::string& what) {
  if (out.device().is_cpu()) return;
  Array cpu_out =
      out.dtype() == DType::flex16
          ? Array::from_flex16(std::vector<std::int16_t>(static_cast<std::size_t>(out.size()), 0),
                               out.iwl(), out.shape())
          : Array::zeros(out.shape(), DType::f32);
  dot(a.copy_to(Device::cpu()), b.copy_to(Device::cpu()), cpu_out, options);
  if (out.dtype() == DType::flex16) {
    EXPECT_EQ(cpu_out.iwl(), out.iwl()) << what;
    EXPECT_EQ(cpu_out.to_vector<std::int16_t>(), out.to_vector<std::int16_t>()) << what;
    EXPECT_EQ(cpu_out.stats().saturated, out.stats().saturated) << what;
  } else {
    EXPECT_EQ(cpu_out.to_vector<float>(), out.to_vector<float>()) << what;
  }
}

// ---- exact integer products -----------------------------------------------------------------
TEST(Dot, DiscriminatorFromTheSpec) {
  Device d = test::device();
  Array a = flex_array({32767, -32767, 1}, 15, {1, 3}, d);
  Array b = flex_array({32767, 32767, 1}, 15, {3, 1}, d);
  Array out = Array::from_flex16(std::vector<std::int16_t>{-7}, 15, {1, 1}, d);
  dot(a, b, out);
  EXPECT_EQ(out.to_vector<std::int16_t>(), std::vector<std::int16_t>{1});
  Array out_f = Array::zeros({1, 1}, DType::f32, d);
  dot(a, b, out_f);
  EXPECT_EQ(out_f.to_vector<float>(), std::vector<float>{1.0f});
}

struct Combo {
  DType a, b, out;
};

const Combo kIntegerCombos[] = {
    {DType::flex16, DType::flex16, DType::flex16}, {DType::flex16, DType::flex16, DType::f32},
    {DType::flex16, DType::u8, DType::flex16},     {DType::flex16, DType::u8, DType::f32},
    {DType::u8, DType::flex16, DType::flex16},     {DType::u8, DType::flex16, DType::f32},
};

std::string name_of(const Combo& c, bool ta, bool tb, std::int64_t m, std::int64_t n,
                    std::int64_t k) {
  return std::string(dtype_name(c.a)) + (ta ? "ᵀ" : "") + " × " + std::string(dtype_name(c.b)) +
         (tb ? "ᵀ" : "") + " → " + std::string(dtype_name(c.out)) + " " + std::to_string(m) + "×" +
         std::to_string(n) + "×" + std::to_string(k);
}

// Runs one product from fresh random operands and checks it; returns the output.
Array check_product(const Combo& c, bool ta, bool tb, std::int64_t m, std::int64_t n,
                    std::int64_t k, unsigned seed, int iwl_a = 3, int iwl_b = -2) {
  Device d = test::device();
  Matrix av = random_operand(c.a, static_cast<std::size_t>(m * k), seed);
  Matrix bv = random_operand(c.b, static_cast<std::size_t>(k * n), seed + 1);
  Array a = stored(av, m, k, ta, c.a, iwl_a, d);
  Array b = stored(bv, k, n, tb, c.b, iwl_b, d);
  Ref r;
  r.iwl_ab = iwl_of(a) + iwl_of(b);
  // An output exponent whose range is about 1.5 standard deviations of the accumulators, so
  // rounding and saturation are both exercised. Products of uniform int16 mantissas have
  // σ ≈ 2^30/3 (int16 × byte: ≈ 2^21.4); a sum of k of them √k times that.
  bool bytes = c.a == DType::u8 || c.b == DType::u8;
  int log_range = (bytes ? 22 : 29) + static_cast<int>(std::ceil(0.5 * std::log2(double(k))));
  r.out_iwl = r.iwl_ab - 30 + log_range;
  Array out = c.out == DType::flex16 ? Array::zeros({m, n}, DType::flex16, d)
                                     : Array::zeros({m, n}, DType::f32, d);
  DotOptions o;
  if (c.out == DType::flex16) o.iwl = r.out_iwl;
  std::string what = name_of(c, ta, tb, m, n, k);
  dot(a, b, out, o);
  expect_matches(a, b, out, r, {}, what);
  expect_same_as_cpu(a, b, out, o, what);
  return out;
}

TEST(Dot, EveryTransposeAndTypeCombinationIsExact) {
  unsigned seed = 1;
  for (const Combo& c : kIntegerCombos)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) check_product(c, ta, tb, 37, 45, 67, seed++);
}

TEST(Dot, OddAndDegenerateShapes) {
  unsigned seed = 100;
  const std::int64_t shapes[][3] = {{1, 1, 1},     {1, 1, 1000},   {127, 129, 1000},
                                    {129, 127, 3}, {1000, 1, 129}, {1, 1000, 127},
                                    {513, 7, 300}, {7, 513, 300}};  // tall-skinny, short-wide
  for (const auto& s : shapes)
    for (const Combo& c : {kIntegerCombos[0], kIntegerCombos[2]})
      for (bool ta : {false, true}) check_product(c, ta, !ta, s[0], s[1], s[2], seed++);
}

TEST(Dot, WholeTilesOfEveryKernelShape) {
  // Shapes past the largest CUDA tiles (128 × 192) in both directions, so interior tiles take
  // the unguarded fast copies and the edges the guarded ones, for every layout.
  unsigned seed = 300;
  for (const Combo& c : {kIntegerCombos[0], kIntegerCombos[2], kIntegerCombos[3]})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) check_product(c, ta, tb, 300, 400, 1000, seed++);
}

TEST(Dot, OperandsReadInPlaceAndLargeProducts) {
  // A u8 B stored k-contiguous with 16-byte aligned rows (k = 1024) is what the CUDA planar
  // kernel reads where it is, without a plane copy.
  unsigned seed = 700;
  for (const Combo& c : {kIntegerCombos[2], kIntegerCombos[3]})
    for (bool ta : {false, true}) check_product(c, ta, true, 300, 200, 1024, seed++);
  // Large enough (m·n ≥ 1024·(m + n)) that the automatic CUDA choice is the planar kernel.
  check_product(kIntegerCombos[0], false, false, 2056, 2072, 80, seed++);
  check_product(kIntegerCombos[2], true, false, 2056, 2072, 80, seed++);
  // An output of at least 4096 × 4096: the CUDA u8 B then takes the wide (128 × 192) tile.
  check_product(kIntegerCombos[2], false, false, 4100, 4097, 40, seed++);
}

TEST(Dot, FullRangeMantissasAndLongSumsStayExact) {
  // Every mantissa −32768: each product is 2^30 and K = 2^20 sums to 2^50, far beyond what a
  // float accumulator or an int32 tensor-core accumulator holds.
  Device d = test::device();
  const std::int64_t k = std::int64_t(1) << 20;
  Matrix ones_a(static_cast<std::size_t>(2 * k), -32768),
      ones_b(static_cast<std::size_t>(k * 3), -32768);
  Array a = flex_array(ones_a, 15, {2, k}, d);
  Array b = flex_array(ones_b, 15, {k, 3}, d);
  Array out = Array::zeros({2, 3}, DType::flex16, d);
  dot(a, b, out, {.iwl_policy = IwlPolicy::exact});
  // Value 2^50 (all exponents 15): the smallest iwl holding it is 51, where it is 16384 · 2^36.
  EXPECT_EQ(out.iwl(), 51);
  EXPECT_EQ(out.to_vector<std::int16_t>(), std::vector<std::int16_t>(6, 16384));
  EXPECT_EQ(out.stats().saturated, 0u);

  // Random full-range values with K = 2^20: exact against the int64 reference, and a value
  // that is exactly a tie for the rounding (acc odd multiple of 2^(scale−1)) rounds to even.
  Matrix av = random_ints(static_cast<std::size_t>(3 * k), -32768, 32767, 7);
  Matrix bv = random_ints(static_cast<std::size_t>(k * 2), -32768, 32767, 8);
  Array ar = flex_array(av, 4, {3, k}, d), br = flex_array(bv, 6, {k, 2}, d);
  Array out2 = Array::zeros({3, 2}, DType::flex16, d);
  Ref r;
  r.iwl_ab = 10;
  r.out_iwl = 10 - 30 + 41;  // σ(acc) ≈ 2^38.4: a range of 2^41 holds every value
  dot(ar, br, out2, {.iwl = r.out_iwl});
  expect_matches(ar, br, out2, r, {}, "K = 2^20 random");
  expect_same_as_cpu(ar, br, out2, {.iwl = r.out_iwl}, "K = 2^20 random");
  Array out3 = Array::zeros({3, 2}, DType::f32, d);
  dot(ar, br, out3);
  expect_matches(ar, br, out3, r, {}, "K = 2^20 random → f32");
}

TEST(Dot, RoundsHalfToEvenAndSaturatesAndCounts) {
  Device d = test::device();
  // scale = 15 + 16 − (15 + 15) = 1: accumulators 3, 5, −3 and 70000 halve to 1.5, 2.5, −1.5
  // and 35000, which round to 2, 2, −2 (ties to even) and saturate to 32767.
  Array a = flex_array({1, 3}, 15, {1, 2}, d);
  Array b = flex_array({0, 2, 0, 10000, 1, 1, -1, 20000}, 15, {2, 4}, d);
  Array out = Array::zeros({1, 4}, DType::flex16, d);
  dot(a, b, out, {.iwl = 16});
  EXPECT_EQ(out.to_vector<std::int16_t>(), (std::vector<std::int16_t>{2, 2, -2, 32767}));
  EXPECT_EQ(out.stats().saturated, 1u);
  EXPECT_EQ(out.stats().max_abs_m, 32767);
}

// Statistics come back without the call waiting for them: products queued back to back into
// different outputs (one output written twice), then each output's record read before its data
// (nothing has synchronised yet) matches its own product; a copy carries the record along.
TEST(Dot, StatisticsOfQueuedProductsAreEachTheirOwn) {
  Device d = test::device();
  const std::int64_t m = 48, k = 40, n = 56;
  std::vector<Array> outs;
  std::vector<std::pair<std::int32_t, std::uint64_t>> want;
  auto queue = [&](std::size_t slot, unsigned seed, int out_iwl) {
    const Matrix av = random_ints(static_cast<std::size_t>(m * k), -32768, 32767, seed);
    const Matrix bv = random_ints(static_cast<std::size_t>(k * n), -32768, 32767, seed + 1);
    Array a = flex_array(av, 0, {m, k}, d), b = flex_array(bv, 0, {k, n}, d);
    if (slot == outs.size()) {
      outs.push_back(Array::zeros({m, n}, DType::flex16, d));
      want.emplace_back();
    }
    dot(a, b, outs[slot], {.iwl = out_iwl});
    Ref r;
    r.iwl_ab = 0;
    r.out_iwl = out_iwl;
    std::int32_t max_abs = 0;
    std::uint64_t saturated = 0;
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        const RefFlex f = ref_flex(r, ref_acc(av, bv, m, n, k, i, j), 0);
        max_abs = std::max<std::int32_t>(max_abs, std::abs(static_cast<std::int32_t>(f.m)));
        saturated += f.saturated ? 1 : 0;
      }
    want[slot] = {max_abs, saturated};
  };
  for (int t = 0; t < 24; ++t) queue(outs.size(), 700 + 2 * t, t % 5);
  queue(0, 900, 6);  // overwrites the first output's record
  for (std::size_t t = 0; t < outs.size(); ++t) {
    EXPECT_EQ(outs[t].stats().max_abs_m, want[t].first) << "output " << t;
    EXPECT_EQ(outs[t].stats().saturated, want[t].second) << "output " << t;
  }
  EXPECT_GT(want[1].second, 0u);  // the low exponents do saturate
  Array copy = outs[3].copy_to(Device::cpu());
  EXPECT_EQ(copy.stats().saturated, want[3].second);
}

TEST(Dot, BetaAccumulatesAndAlphaScales) {
  Device d = test::device();
  const std::int64_t m = 33, n = 17, k = 65;
  Matrix av = random_ints(m * k, -32768, 32767, 11), bv = random_ints(k * n, -32768, 32767, 12);
  Array a = flex_array(av, 2, {m, k}, d), b = flex_array(bv, 1, {k, n}, d);
  // flex16 out with beta: old values at the output's own exponent.
  Matrix old = random_ints(m * n, -20000, 20000, 13);
  Array out = flex_array(old, 9, {m, n}, d);
  Ref r;
  r.iwl_ab = 3;
  r.alpha = 0.75;
  r.beta = -1.5;
  r.out_iwl = 9;
  r.old_iwl = 9;
  dot(a, b, out, {.alpha = 0.75, .beta = -1.5});
  expect_matches(a, b, out, r, std::vector<double>(old.begin(), old.end()), "flex16 beta");
  // f32 out with beta = 1.
  std::vector<float> oldf(static_cast<std::size_t>(m * n));
  for (std::size_t i = 0; i < oldf.size(); ++i) oldf[i] = 0.25f * static_cast<float>(i % 13) - 1;
  Array outf = Array::from_vector(oldf, {m, n}, d);
  Ref rf;
  rf.iwl_ab = 3;
  rf.beta = 1.0;
  dot(a, b, outf, 1.0, 1.0);
  expect_matches(a, b, outf, rf, std::vector<double>(oldf.begin(), oldf.end()), "f32 beta");
  // Both backends agree on the double path too.
  Array out2 = flex_array(old, 9, {m, n}, d);
  dot(a, b, out2, {.alpha = 0.75, .beta = -1.5});
  Array cpu_out = flex_array(old, 9, {m, n}, Device::cpu());
  dot(a.copy_to(Device::cpu()), b.copy_to(Device::cpu()), cpu_out, {.alpha = 0.75, .beta = -1.5});
  EXPECT_EQ(cpu_out.to_vector<std::int16_t>(), out2.to_vector<std::int16_t>());
}

TEST(Dot, ExactPolicyPicksTheSmallestExponentThatHolds) {
  Device d = test::device();
  const std::int64_t m = 20, n = 30, k = 40;
  for (unsigned seed : {21u, 22u, 23u}) {
    Matrix av = random_ints(m * k, -32768, 32767, seed),
           bv = random_ints(k * n, -300, 300, seed + 9);
    Array a = flex_array(av, 0, {m, k}, d), b = flex_array(bv, 5, {k, n}, d);
    Array out = Array::zeros({m, n}, DType::flex16, d);
    dot(a, b, out, {.iwl_policy = IwlPolicy::exact});
    EXPECT_EQ(out.stats().saturated, 0u);
    Ref r;
    r.iwl_ab = 5;
    r.out_iwl = out.iwl();
    expect_matches(a, b, out, r, {}, "exact policy");
    // One exponent finer would saturate somewhere.
    Ref finer = r;
    finer.out_iwl = out.iwl() - 1;
    bool saturates = false;
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j)
        saturates |= ref_flex(finer, ref_acc(av, bv, m, n, k, i, j), 0).saturated;
    EXPECT_TRUE(saturates) << "iwl " << out.iwl() << " is not the smallest";
  }
  // dot(a, b) allocates with the exact policy.
  Array a = flex_array({3, 4}, 15, {1, 2}, d), b = flex_array({5, 6}, 15, {2, 1}, d);
  Array c = dot(a, b);
  EXPECT_EQ(c.dtype(), DType::flex16);
  EXPECT_EQ(c.to_floats(), std::vector<float>{39.0f});
}

TEST(Dot, SlicedAndReversedViews) {
  Device d = test::device();
  // A = every other row and every third column of a 50×90 matrix, reversed along rows;
  // B = a strided column window of a 40×70 matrix.
  Matrix big_a = random_ints(50 * 90, -32768, 32767, 31), big_b = random_ints(40 * 70, 0, 255, 32);
  Array a = flex_array(big_a, 1, {50, 90}, d).index("::-2, 1::3");  // 25 × 30
  Array b = u8_array(big_b, {40, 70}, d).index("5:35, 3:60:2");     // 30 × 29
  ASSERT_EQ(a.shape(), (Shape{25, 30}));
  ASSERT_EQ(b.shape(), (Shape{30, 29}));
  // Output: a strided window of a larger array; elements outside it must stay untouched.
  Array holder = Array::full({60, 40}, 0.5, DType::flex16, d);
  Array out = holder.index("1:51:2, 3:32");  // 25 × 29
  int before = holder.iwl();
  Ref r;
  r.iwl_ab = 1 + 15;
  r.out_iwl = r.iwl_ab - 30 + 26;  // k = 30 int16 × byte products: σ ≈ 2^23.9
  dot(a, b, out, {.iwl = r.out_iwl});
  expect_matches(a, b, out, r, {}, "views");
  expect_same_as_cpu(a, b, out, {.iwl = r.out_iwl}, "views");
  std::vector<std::int16_t> all = holder.to_vector<std::int16_t>();
  std::int16_t untouched = static_cast<std::int16_t>(std::ldexp(0.5, 15 - before));
  EXPECT_EQ(all[0], untouched);
  EXPECT_EQ(all[60 * 40 - 1], untouched);
}

TEST(Dot, BatchedWithASharedOperand) {
  Device d = test::device();
  const std::int64_t batch = 3, m = 19, n = 23, k = 29;
  Matrix av = random_ints(batch * m * k, -32768, 32767, 41), bv = random_ints(k * n, 0, 1, 42);
  Array a = flex_array(av, 0, {batch, m, k}, d);
  Array b = u8_array(bv, {k, n}, d);  // one spike matrix for every batch entry
  Array out = Array::zeros({batch, m, n}, DType::flex16, d);
  dot(a, b, out, {.iwl = 6});
  for (std::int64_t i = 0; i < batch; ++i) {
    Ref r;
    r.iwl_ab = 15;
    r.out_iwl = 6;
    Array ai = a(i), oi = out(i);
    // Each batch entry recomputed alone must match (statistics are the whole call's).
    Array alone = Array::zeros({m, n}, DType::flex16, d);
    dot(ai, b, alone, {.iwl = 6});
    EXPECT_EQ(alone.to_vector<std::int16_t>(), oi.to_vector<std::int16_t>()) << "batch " << i;
    expect_matches(ai, b, alone, r, {}, "batch entry");
  }
  // Both operands batched, transposed per entry.
  Matrix cv = random_ints(batch * n * k, -32768, 32767, 43);
  Array c = flex_array(cv, 2, {batch, n, k}, d).transpose({0, 2, 1});  // batch × k × n
  Array out2 = Array::zeros({batch, m, n}, DType::f32, d);
  dot(a, c, out2);
  for (std::int64_t i = 0; i < batch; ++i) {
    Ref r;
    r.iwl_ab = 2;
    Array ai = a(i), ci = c(i), oi = out2(i);
    Array alone = Array::zeros({m, n}, DType::f32, d);
    dot(ai, ci, alone);
    EXPECT_EQ(alone.to_vector<float>(), oi.to_vector<float>()) << "batch " << i;
    expect_matches(ai, ci, alone, r, {}, "batched both");
  }
}

TEST(Dot, RepeatedShapesReuseTheirPlan) {
  if (!test::device().is_cuda()) GTEST_SKIP() << "the plan cache belongs to the CUDA kernels";
  Device d = test::device();
  Array a = flex_array(random_ints(70 * 90, -32768, 32767, 71), 0, {70, 90}, d);
  Array b = flex_array(random_ints(90 * 110, -32768, 32767, 72), 0, {90, 110}, d);
  Array out = Array::zeros({70, 110}, DType::flex16, d);
  dot(a, b, out, {.iwl = 10});
  cuda::GemmPlanStats first = cuda::gemm_plan_stats();
  dot(a, b, out, {.iwl = 11});  // same shape and layout, other exponent: same plan
  cuda::GemmPlanStats again = cuda::gemm_plan_stats();
  EXPECT_EQ(again.plans_made, first.plans_made);
  EXPECT_EQ(again.plan_hits, first.plan_hits + 1);
  Array out2 = Array::zeros({70, 90}, DType::flex16, d);
  dot(a, b.index(":, :90"), out2, {.iwl = 10});  // another shape: one new plan
  EXPECT_EQ(cuda::gemm_plan_stats().plans_made, first.plans_made + 1);
}

TEST(Dot, RepeatedRunsAreBitIdentical) {
  Device d = test::device();
  Matrix av = random_ints(300 * 500, -32768, 32767, 51),
         bv = random_ints(500 * 200, -32768, 32767, 52);
  Array a = flex_array(av, 0, {300, 500}, d), b = flex_array(bv, 0, {500, 200}, d);
  Array first = Array::zeros({300, 200}, DType::flex16, d);
  dot(a, b, first, {.iwl = 9});
  for (int run = 0; run < 3; ++run) {
    Array again = Array::zeros({300, 200}, DType::flex16, d);
    dot(a, b, again, {.iwl = 9});
    EXPECT_EQ(first.to_vector<std::int16_t>(), again.to_vector<std::int16_t>());
  }
}

// ---- f32 ------------------------------------------------------------------------------------
TEST(Dot, Float32AgainstFloat64) {
  Device d = test::device();
  std::mt19937 rng(61);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const std::int64_t shapes[][3] = {{1, 1, 1}, {127, 129, 1000}, {64, 3, 257}, {5, 300, 31}};
  for (const auto& s : shapes) {
    std::int64_t m = s[0], n = s[1], k = s[2];
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        std::vector<float> av(static_cast<std::size_t>(m * k)), bv(static_cast<std::size_t>(k * n));
        for (float& x : av) x = u(rng);
        for (float& x : bv) x = u(rng);
        Array a = ta ? Array::from_vector(av, {k, m}, d).T() : Array::from_vector(av, {m, k}, d);
        Array b = tb ? Array::from_vector(bv, {n, k}, d).T() : Array::from_vector(bv, {k, n}, d);
        std::vector<float> la = a.to_floats(), lb = b.to_floats();
        std::vector<float> oldv(static_cast<std::size_t>(m * n));
        for (float& x : oldv) x = u(rng);
        Array out = Array::from_vector(oldv, {m, n}, d);
        dot(a, b, out, 2.0, 0.5);
        std::vector<float> got = out.to_floats();
        double err = 0, norm = 0;
        for (std::int64_t i = 0; i < m; ++i) {
          for (std::int64_t j = 0; j < n; ++j) {
            double acc = 0;
            for (std::int64_t p = 0; p < k; ++p)
              acc += static_cast<double>(la[i * k + p]) * lb[p * n + j];
            double want = 2.0 * acc + 0.5 * oldv[i * n + j];
            double diff = got[i * n + j] - want;
            err += diff * diff;
            norm += want * want;
          }
        }
        double rel = std::sqrt(err / std::max(norm, 1e-30));
        EXPECT_LT(rel, 1e-6 * std::sqrt(static_cast<double>(k)) + 1e-7)
            << m << "×" << n << "×" << k << " ta " << ta << " tb " << tb;
      }
    }
  }
}

TEST(Dot, Float32StridedViewsAndBatches) {
  Device d = test::device();
  std::vector<float> big(60 * 80);
  for (std::size_t i = 0; i < big.size(); ++i)
    big[i] = static_cast<float>((i * 37) % 101) / 50.0f - 1;
  Array src = Array::from_vector(big, {60, 80}, d);
  Array a = src.index("::2, ::-3");     // 30 × 27, no unit stride
  Array b = src.index("3:30, 1:80:4");  // 27 × 20
  Array holder = Array::zeros({40, 50}, DType::f32, d);
  Array out = holder.index("::-1, 5:45:2").index(":30");  // 30 × 20, strided and reversed
  dot(a, b, out);
  std::vector<float> la = a.to_floats(), lb = b.to_floats(), got = out.to_floats();
  for (std::int64_t i = 0; i < 30; ++i)
    for (std::int64_t j = 0; j < 20; ++j) {
      double acc = 0;
      for (std::int64_t p = 0; p < 27; ++p)
        acc += static_cast<double>(la[i * 27 + p]) * lb[p * 20 + j];
      EXPECT_NEAR(got[i * 20 + j], acc, 1e-4) << i << "," << j;
    }
  // Batched: (2, 30, 27) · (27, 20) with a shared right operand.
  Array a3 = Array::from_vector(std::vector<float>(big.begin(), big.begin() + 2 * 30 * 27),
                                {2, 30, 27}, d);
  Array out3 = Array::zeros({2, 30, 20}, DType::f32, d);
  dot(a3, b, out3);
  for (std::int64_t e = 0; e < 2; ++e) {
    Array alone = Array::zeros({30, 20}, DType::f32, d);
    dot(a3(e), b, alone);
    std::vector<float> x = alone.to_floats(), y = out3(e).to_floats();
    for (std::size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], 1e-5);
  }
}

// A weight gradient's shape: a few hundred outputs, a hundred thousand products deep. On CUDA
// it is split along k (one chunk shorter when k does not divide), and the chunks' partial
// products are summed in order: against float64, alpha and beta applied once, into a strided
// output, and the same bits on a second run.
TEST(Dot, Float32DeepThinProductsAgainstFloat64) {
  Device d = test::device();
  std::mt19937 rng(67);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  struct Case {
    std::int64_t m, n, k;
  };
  for (const Case c : {Case{9, 128, 100352}, Case{40, 33, 20007}}) {
    std::vector<float> av(static_cast<std::size_t>(c.m * c.k)),
        bv(static_cast<std::size_t>(c.n * c.k));
    for (float& x : av) x = u(rng);
    for (float& x : bv) x = u(rng);
    // As the lowered convolution's update: columns (m, k) · grad_outᵀ, grad_out (n, k).
    const Array a = Array::from_vector(av, {c.m, c.k}, d);
    const Array b = Array::from_vector(bv, {c.n, c.k}, d).T();
    std::vector<float> oldv(static_cast<std::size_t>(c.m * c.n));
    for (float& x : oldv) x = u(rng);
    Array holder = Array::zeros({c.m, 2 * c.n}, DType::f32, d);
    Array out = holder(slice(), slice(0, 2 * c.n, 2));  // every other column
    out.assign(Array::from_vector(oldv, {c.m, c.n}, d));
    if (d.is_cuda()) {
      // The strided output goes through a contiguous one, whose product is split.
      const Array contiguous = Array::zeros({c.m, c.n}, DType::f32, d);
      EXPECT_EQ(dot_kernel_name(a, b, contiguous, {.alpha = 2.0, .beta = 0.5}),
                "cuda.cublas_f32_split_k");
    }
    dot(a, b, out, 2.0, 0.5);
    const std::vector<float> got = out.to_floats();
    double err = 0, norm = 0;
    for (std::int64_t i = 0; i < c.m; ++i)
      for (std::int64_t j = 0; j < c.n; ++j) {
        double acc = 0;
        for (std::int64_t p = 0; p < c.k; ++p)
          acc += static_cast<double>(av[i * c.k + p]) * bv[j * c.k + p];
        const double want = 2.0 * acc + 0.5 * oldv[i * c.n + j];
        err += (got[i * c.n + j] - want) * (got[i * c.n + j] - want);
        norm += want * want;
      }
    EXPECT_LT(std::sqrt(err / norm), 1e-6 * std::sqrt(static_cast<double>(c.k)))
        << c.m << "×" << c.n << "×" << c.k;
    // The columns between the output's are untouched.
    for (float x : holder(slice(), slice(1, 2 * c.n, 2)).to_floats()) ASSERT_EQ(x, 0.0f);
    // beta = 0: the output's old values are not read (NaN stays out).
    Array fresh = Array::full({c.m, c.n}, std::nan(""), DType::f32, d);
    dot(a, b, fresh);
    Array again = Array::full({c.m, c.n}, std::nan(""), DType::f32, d);
    dot(a, b, again);
    const std::vector<float> f = fresh.to_floats(), g = again.to_floats();
    for (std::size_t i = 0; i < f.size(); ++i) {
      ASSERT_TRUE(std::isfinite(f[i])) << i;
      ASSERT_EQ(std::memcmp(&f[i], &g[i], sizeof(float)), 0) << "run to run, element " << i;
    }
  }
  // Batched or shallow products keep the plain call.
  if (d.is_cuda()) {
    const Array a = Array::zeros({2, 9, 100352}, DType::f32, d);
    const Array b = Array::zeros({100352, 128}, DType::f32, d);
    EXPECT_EQ(dot_kernel_name(a, b, Array::zeros({2, 9, 128}, DType::f32, d)), "cuda.cublas_f32");
    EXPECT_EQ(dot_kernel_name(Array::zeros({9, 512}, DType::f32, d),
                              Array::zeros({512, 128}, DType::f32, d),
                              Array::zeros({9, 128}, DType::f32, d)),
              "cuda.cublas_f32");
  }
}

// ---- refusals -------------------------------------------------------------------------------
template <class Error>
void expect_refused(const std::function<void()>& call, const std::string& needle) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Dot, RefusesBadInputAndWritesNothing) {
  Device d = test::device();
  Array a = Array::ones({4, 5}, DType::flex16, d), b = Array::ones({5, 6}, DType::flex16, d);
  Array out = Array::full({4, 6}, 0.25, DType::flex16, d);
  std::vector<std::int16_t> before = out.to_vector<std::int16_t>();
  int iwl = out.iwl();
  expect_refused<ShapeError>(
      [&] {
        dot(a, Array::ones({4, 6}, DType::flex16, d), out);
      },
      "inner dimensions differ: A has 5 columns, B has 4 rows");
  expect_refused<ShapeError>(
      [&] {
        dot(a, b, Array::zeros({4, 7}, DType::flex16, d));
      },
      "out must have shape (4, 6)");
  expect_refused<ShapeError>([&] { dot(Array::ones({5}, DType::flex16, d), b, out); }, "rank 2");
  expect_refused<ShapeError>(
      [&] {
        dot(Array::ones({2, 4, 5}, DType::flex16, d), Array::ones({3, 5, 6}, DType::flex16, d),
            Array::zeros({2, 4, 6}, DType::flex16, d));
      },
      "batch sizes differ");
  expect_refused<DTypeError>(
      [&] {
        dot(a, Array::ones({5, 6}, DType::f32, d), out);
      },
      "unsupported types flex16 × f32 → flex16");
  expect_refused<DTypeError>(
      [&] {
        dot(Array::ones({4, 5}, DType::f32, d), Array::ones({5, 6}, DType::f32, d), out);
      },
      "unsupported types f32 × f32 → flex16");
  expect_refused<DTypeError>(
      [&] {
        dot(Array::ones({4, 5}, DType::u8, d), Array::ones({5, 6}, DType::u8, d), out);
      },
      "unsupported types u8 × u8");
  expect_refused<DTypeError>(
      [&] {
        dot(Array::ones({4, 5}, DType::bf16, d), Array::ones({5, 6}, DType::bf16, d),
            Array::zeros({4, 6}, DType::f32, d));
      },
      "supported:");
  // Aliasing: out is a window of A's own storage.
  Array square = Array::ones({6, 6}, DType::flex16, d);
  expect_refused<ValueError>([&] { dot(square, square, square); }, "overlaps an input");
  expect_refused<ValueError>([&] { dot(square.index(":4, :5"), b, square.index("2:, :")); },
                             "overlaps an input");
  // A broadcast output.
  expect_refused<ValueError>(
      [&] {
        dot(a, b, Array::zeros({1, 6}, DType::flex16, d).broadcast_to({4, 6}));
      },
      "read-only or broadcast");
  expect_refused<DTypeError>(
      [&] {
        dot(a, b, Array::zeros({4, 6}, DType::f32, d), {.iwl_policy = IwlPolicy::exact});
      },
      "is not flex16");
  expect_refused<ValueError>([&] { dot(a, b, out, {.iwl = 400}); }, "iwl");
  if (d.is_cuda()) {
    expect_refused<DeviceError>(
        [&] {
          dot(a, b, Array::zeros({4, 6}, DType::flex16));
        },
        "different devices");
  }
  EXPECT_EQ(out.to_vector<std::int16_t>(), before);
  EXPECT_EQ(out.iwl(), iwl);
}

TEST(Dot, EmptyInnerDimensionGivesBetaTimesOut) {
  Device d = test::device();
  Array a = Array::zeros({3, 0}, DType::f32, d), b = Array::zeros({0, 2}, DType::f32, d);
  Array out = Array::full({3, 2}, 4.0, DType::f32, d);
  dot(a, b, out, 1.0, 0.5);
  EXPECT_EQ(out.to_floats(), std::vector<float>(6, 2.0f));
  dot(a, b, out);
  EXPECT_EQ(out.to_floats(), std::vector<float>(6, 0.0f));
}

}  // namespace
}  // namespace flexkit
