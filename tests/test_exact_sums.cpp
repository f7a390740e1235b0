// Data-parallel flex16 building blocks. exact_sums: an integer product's unrounded sums against
// an int64 reference, for every type pair and strided views; the sums of the parts of a split
// inner dimension, added and rounded by store_exact_sums, equal dot() of the whole product bit
// for bit under every policy. ShardedWrites: a write's exponent and an Autoflex manager's record
// take the other processes' ranges into account (a stand-in for the other processes).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "flexkit/autoflex.hpp"
#include "flexkit/error.hpp"
#include "flexkit/expr.hpp"
#include "flexkit/gemm.hpp"
#include "flexkit/portable/gemm_epilogue.hpp"
#include "gemm/exact_sums.hpp"
#include "support/integer_arrays.hpp"
#include "support/test_device.hpp"

namespace flexkit {
namespace {

using test::Ints;
using test::random_ints;

// Σ_p a[i, p] · b[p, j] in int64, a (m, k) and b (k, n) row-major.
Ints reference_sums(const Ints& a, const Ints& b, std::int64_t m, std::int64_t n, std::int64_t k) {
  Ints s(static_cast<std::size_t>(m * n), 0);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t p = 0; p < k; ++p) s[i * n + j] += a[i * k + p] * b[p * n + j];
  return s;
}

struct Pair {
  Ints a, b;
  Array A, B;
};

// A (m, k) and B (k, n) of the given kinds ("flex16" or "u8"), extreme values included.
Pair make_pair(const char* ka, const char* kb, std::int64_t m, std::int64_t n, std::int64_t k,
               unsigned seed) {
  Pair p;
  const bool a8 = std::string(ka) == "u8", b8 = std::string(kb) == "u8";
  p.a = random_ints(m * k, a8 ? 0 : -32768, a8 ? 255 : 32767, seed);
  p.b = random_ints(k * n, b8 ? 0 : -32768, b8 ? 255 : 32767, seed + 1);
  p.a[0] = a8 ? 255 : -32768;
  p.b[0] = b8 ? 255 : -32768;
  p.A = a8 ? test::u8_array(p.a, {m, k}) : test::flex_array(p.a, 3, {m, k});
  p.B = b8 ? test::u8_array(p.b, {k, n}) : test::flex_array(p.b, -2, {k, n});
  return p;
}

TEST(ExactSums, EqualAnInt64ReferenceForEveryTypePair) {
  const std::int64_t m = 37, n = 29, k = 700;  // several k blocks of the CPU kernels
  for (auto [ka, kb] : {std::pair{"flex16", "flex16"}, {"flex16", "u8"}, {"u8", "flex16"}}) {
    SCOPED_TRACE(std::string(ka) + " × " + kb);
    const Pair p = make_pair(ka, kb, m, n, k, 11);
    const gemm::ExactSums s = gemm::exact_sums(p.A, p.B);
    EXPECT_EQ(s.m, m);
    EXPECT_EQ(s.n, n);
    EXPECT_EQ(s.iwl_ab, (std::string(ka) == "u8" ? 15 : 3) + (std::string(kb) == "u8" ? 15 : -2));
    EXPECT_EQ(s.values, reference_sums(p.a, p.b, m, n, k));
  }
}

TEST(ExactSums, TakeTransposedViews) {
  // The weight gradient's form: g (out, positions) · xᵀ with x (in, positions).
  const std::int64_t out = 9, in = 13, positions = 300;
  const Ints g = random_ints(out * positions, -32768, 32767, 5);
  const Ints x = random_ints(in * positions, 0, 1, 6);
  const gemm::ExactSums s = gemm::exact_sums(test::flex_array(g, 0, {out, positions}),
                                             test::u8_array(x, {in, positions}).T());
  Ints xt(static_cast<std::size_t>(positions * in));
  for (std::int64_t i = 0; i < in; ++i)
    for (std::int64_t p = 0; p < positions; ++p) xt[p * in + i] = x[i * positions + p];
  EXPECT_EQ(s.values, reference_sums(g, xt, out, in, positions));
}

// dot(a, b, out, options) on the whole product, against the parts' sums added and stored.
void expect_split_equals_whole(const Pair& p, std::int64_t m, std::int64_t n, std::int64_t k,
                               DType out_dtype, const HeavyOpOptions& options, bool old_values) {
  const Array whole = Array::zeros({m, n}, out_dtype, test::device());
  const Array split = Array::zeros({m, n}, out_dtype, test::device());
  if (old_values) {  // beta reads them
    std::vector<float> old(static_cast<std::size_t>(m * n));
    for (std::size_t i = 0; i < old.size(); ++i) old[i] = static_cast<float>(i % 7) - 3.0f;
    for (const Array& o : {whole, split}) {
      Array t = o;
      if (out_dtype == DType::flex16) t.set_iwl(2);
      t.assign_floats(old);
    }
  }
  dot(p.A, p.B, whole, options);
  gemm::ExactSums total;
  for (auto [k0, k1] : {std::pair<std::int64_t, std::int64_t>{0, 1}, {1, k / 3}, {k / 3, k}}) {
    const gemm::ExactSums part = gemm::exact_sums(p.A(all, slice(k0, k1)), p.B(slice(k0, k1), all));
    if (total.values.empty()) {
      total = part;
      continue;
    }
    ASSERT_EQ(part.iwl_ab, total.iwl_ab);
    for (std::size_t i = 0; i < total.values.size(); ++i) total.values[i] += part.values[i];
  }
  gemm::store_exact_sums(total, split, options);
  if (out_dtype == DType::flex16) {
    EXPECT_EQ(split.iwl(), whole.iwl());
    EXPECT_EQ(split.to_vector<std::int16_t>(), whole.to_vector<std::int16_t>());
    EXPECT_EQ(split.stats().max_abs_m, whole.stats().max_abs_m);
    EXPECT_EQ(split.stats().saturated, whole.stats().saturated);
  } else {
    EXPECT_EQ(split.to_floats(), whole.to_floats());
  }
}

TEST(ExactSums, SplitInnerDimensionStoresAsTheWholeProduct) {
  const std::int64_t m = 21, n = 17, k = 600;
  for (auto [ka, kb] : {std::pair{"flex16", "flex16"}, {"flex16", "u8"}, {"u8", "flex16"}}) {
    SCOPED_TRACE(std::string(ka) + " × " + kb);
    const Pair p = make_pair(ka, kb, m, n, k, 23);
    HeavyOpOptions exact;
    exact.iwl_policy = IwlPolicy::exact;
    HeavyOpOptions fixed_saturating;  // a fixed exponent too small: saturation counted
    fixed_saturating.iwl = -20;
    HeavyOpOptions accumulate;
    accumulate.beta = 1.0;
    accumulate.iwl_policy = IwlPolicy::exact;
    HeavyOpOptions scaled;
    scaled.alpha = 0.375;
    scaled.beta = -0.5;
    {
      SCOPED_TRACE("exact");
      expect_split_equals_whole(p, m, n, k, DType::flex16, exact, false);
    }
    {
      SCOPED_TRACE("fixed, saturating");
      expect_split_equals_whole(p, m, n, k, DType::flex16, fixed_saturating, false);
    }
    {
      SCOPED_TRACE("beta 1 over old values");
      expect_split_equals_whole(p, m, n, k, DType::flex16, accumulate, true);
    }
    {
      SCOPED_TRACE("f32 out, alpha and beta");
      expect_split_equals_whole(p, m, n, k, DType::f32, scaled, true);
    }
  }
}

TEST(ExactSums, AutoflexHistoriesMatchTheWholeProducts) {
  // Several steps of an Autoflex-managed gradient (beta 1 onto zeros, as a trainer adds it):
  // the same exponents, mantissas and manager state whichever way the sums are taken.
  const std::int64_t m = 8, n = 6, k = 90;
  const Array whole = Array::zeros({m, n}, DType::flex16, test::device());
  const Array split = Array::zeros({m, n}, DType::flex16, test::device());
  HeavyOpOptions o;
  o.beta = 1.0;
  o.iwl_policy = IwlPolicy::autoflex;
  for (unsigned step = 0; step < 5; ++step) {
    SCOPED_TRACE(step);
    Pair p = make_pair("flex16", "u8", m, n, k, 100 + step);
    // Growing values: the predictions must move (and saturate once) alike.
    p.A = test::flex_array(p.a, static_cast<int>(step) * 2 - 3, {m, k});
    Array(whole).fill(0.0);
    Array(split).fill(0.0);
    dot(p.A, p.B, whole, o);
    gemm::ExactSums total = gemm::exact_sums(p.A(all, slice(0, k / 2)), p.B(slice(0, k / 2), all));
    const gemm::ExactSums rest =
        gemm::exact_sums(p.A(all, slice(k / 2, k)), p.B(slice(k / 2, k), all));
    for (std::size_t i = 0; i < total.values.size(); ++i) total.values[i] += rest.values[i];
    gemm::store_exact_sums(total, split, o);
    EXPECT_EQ(split.iwl(), whole.iwl());
    EXPECT_EQ(split.to_vector<std::int16_t>(), whole.to_vector<std::int16_t>());
    const AutoflexReport a = split.autoflex().report(), b = whole.autoflex().report();
    EXPECT_EQ(a.writes, b.writes);
    EXPECT_EQ(a.overflow_writes, b.overflow_writes);
    EXPECT_EQ(a.next_iwl, b.next_iwl);
  }
}

TEST(ExactSums, RefuseFloatOperandsAndWrongOutputs) {
  const Array f = Array::zeros({3, 4}, DType::f32, test::device());
  const Array x = Array::zeros({4, 2}, DType::flex16, test::device());
  EXPECT_THROW(gemm::exact_sums(f, x), DTypeError);
  EXPECT_THROW(gemm::exact_sums(Array::zeros({3, 5}, DType::flex16, test::device()), x),
               ShapeError);
  const gemm::ExactSums s =
      gemm::exact_sums(Array::zeros({3, 4}, DType::flex16, test::device()), x);
  EXPECT_THROW(gemm::store_exact_sums(s, Array::zeros({2, 3}, DType::flex16, test::device()), {}),
               ShapeError);
  EXPECT_THROW(gemm::store_exact_sums(s, Array::zeros({3, 2}, DType::u8, test::device()), {}),
               DTypeError);
}

// Another process's shard, as far as the writes can tell: its bytes are this process's with the
// largest magnitude replaced (`other_max` for a float range, `other_m` for a record's max |m|).
class OtherShard final : public ShardAgreement {
 public:
  int gathers = 0;
  float other_max = 0;
  void all_gather(const void* mine, void* all, std::size_t bytes) override {
    ++gathers;
    auto* out = static_cast<unsigned char*>(all);
    std::memcpy(out, mine, bytes);
    std::memcpy(out + bytes, mine, bytes);
    if (bytes == sizeof(float)) std::memcpy(out + bytes, &other_max, sizeof(float));
    if (bytes == sizeof(portable::Flex16Stats)) {
      portable::Flex16Stats s;
      std::memcpy(&s, mine, bytes);
      s.max_abs_m = 32767;  // the other shard saturated
      s.saturated = 3;
      std::memcpy(out + bytes, &s, bytes);
    }
  }
  int processes() const override { return 2; }
};

TEST(ShardedWrites, AnExactWriteTakesTheLargestRangeOfAllShards) {
  const Array x =
      Array::from_floats(std::vector<float>{0.25f, -0.5f, 0.125f}, {3}, DType::f32, test::device());
  const Array alone = Array::empty({3}, DType::flex16, test::device());
  assign(alone, Expr(x), {.iwl_policy = IwlPolicy::exact});
  EXPECT_EQ(alone.iwl(), 0);  // max |x| = 0.5 < 2^0
  OtherShard other;
  other.other_max = 5.0f;  // another process's shard holds 5: iwl 3 for the whole tensor
  const Array shard = Array::empty({3}, DType::flex16, test::device());
  {
    ShardedWrites sharded(other);
    assign(shard, Expr(x), {.iwl_policy = IwlPolicy::exact});
  }
  EXPECT_EQ(shard.iwl(), 3);
  EXPECT_EQ(shard.to_floats(), x.to_floats());  // exact at either exponent
  EXPECT_GE(other.gathers, 1);
  // Outside the scope nothing is gathered.
  const int before = other.gathers;
  assign(shard, Expr(x), {.iwl_policy = IwlPolicy::exact});
  EXPECT_EQ(other.gathers, before);
  EXPECT_EQ(shard.iwl(), 0);
}

TEST(ShardedWrites, AnExactProductTakesTheLargestRangeOfAllShards) {
  const Array a =
      Array::from_floats(std::vector<float>{0.5f, 0.25f}, {1, 2}, DType::flex16, test::device());
  const Array b =
      Array::from_floats(std::vector<float>{0.5f, 0.5f}, {2, 1}, DType::flex16, test::device());
  const Array alone = Array::empty({1, 1}, DType::flex16, test::device());
  dot(a, b, alone, {.iwl_policy = IwlPolicy::exact});
  // A stand-in whose other shard measured a product 64 times larger (accumulators scaled).
  class LargerProduct final : public ShardAgreement {
   public:
    void all_gather(const void* mine, void* all, std::size_t bytes) override {
      ASSERT_EQ(bytes, sizeof(portable::GemmStats));
      portable::GemmStats s;
      std::memcpy(&s, mine, bytes);
      std::memcpy(all, &s, bytes);
      s.acc_max *= 64;
      s.acc_min *= 64;
      std::memcpy(static_cast<unsigned char*>(all) + bytes, &s, bytes);
    }
    int processes() const override { return 2; }
  } larger;
  const Array shard = Array::empty({1, 1}, DType::flex16, test::device());
  {
    ShardedWrites sharded(larger);
    dot(a, b, shard, {.iwl_policy = IwlPolicy::exact});
  }
  EXPECT_EQ(shard.iwl(), alone.iwl() + 6);
  EXPECT_EQ(shard.to_floats(), alone.to_floats());
}

TEST(ShardedWrites, AnAutoflexManagerRecordsTheWholeTensor) {
  // The other shard saturated: the manager widens as if this write had (+2 iwl at least, per
  // docs/flex16.md), though this shard's values fit.
  const Array x =
      Array::from_floats(std::vector<float>{1.0f, 0.5f}, {2}, DType::f32, test::device());
  const Array alone = Array::empty({2}, DType::flex16, test::device());
  const Array shard = Array::empty({2}, DType::flex16, test::device());
  OtherShard other;
  other.other_max = 1.0f;  // the first (exact) write sees the same range in both shards
  for (int step = 0; step < 2; ++step) {
    assign(alone, Expr(x), {.iwl_policy = IwlPolicy::autoflex});
    ShardedWrites sharded(other);
    assign(shard, Expr(x), {.iwl_policy = IwlPolicy::autoflex});
  }
  const AutoflexReport a = alone.autoflex().report(), s = shard.autoflex().report();
  EXPECT_EQ(a.overflow_writes, 0);
  EXPECT_EQ(s.overflow_writes, 2);
  EXPECT_EQ(s.saturated, 6u);
  EXPECT_GE(s.next_iwl, a.next_iwl + 2);
}

}  // namespace
}  // namespace flexkit
