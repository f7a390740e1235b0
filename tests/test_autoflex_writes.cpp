// IwlPolicy::autoflex in the operations that write flex16 — assign, dot, the convolutions —
// against the behaviour it promises: the pinned first write and trace, an overflow followed by
// convergence, a history kept across fresh arrays, writes that read their own output or cover
// part of their storage, and clear errors. Values are checked against the float64 restatement
// of flex16 (m · 2^(iwl−15)); the iwls a sequence uses against a manager fed on the host with
// statistics computed here. With --device=cuda the same sequences must store the same bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "flexkit/autoflex.hpp"
#include "flexkit/conv.hpp"
#include "flexkit/error.hpp"
#include "flexkit/expr.hpp"
#include "flexkit/gemm.hpp"
#include "support/test_device.hpp"

namespace {

using namespace flexkit;
namespace portable = flexkit::portable;

constexpr AssignOptions kAutoflex{.iwl_policy = IwlPolicy::autoflex};

Device dev() {
  return test::device();
}

Array scalar_f32(double v) {
  return Array::full({1}, v, DType::f32, dev());
}

double read1(const Array& a) {
  return static_cast<double>(a.to_floats().at(0));
}

TEST(AutoflexWrites, FirstWriteTakesTheFinestIwl) {
  Array y = Array::empty({1}, DType::flex16, dev());
  assign(y, Expr(scalar_f32(0.4)), kAutoflex);
  EXPECT_EQ(read1(y), 0.399993896484375);
  EXPECT_EQ(y.iwl(), -1);
  EXPECT_EQ(y.autoflex().report().writes, 1);
}

// y = x + 1.5 for x = 0, 1, 2, 3: 1.5, then the second write saturates at the first one's range,
// then the range is 4x wider.
void expect_pinned_trace(const std::vector<double>& got, const std::vector<int>& iwls) {
  const std::vector<double> want{1.5, 1.99993896484375, 3.5, 4.5};
  EXPECT_EQ(got, want);
  EXPECT_EQ(iwls, (std::vector<int>{1, 1, 3, 3}));
}

TEST(AutoflexWrites, PinnedTraceThroughAssign) {
  Array y = Array::empty({1}, DType::flex16, dev());
  std::vector<double> got;
  std::vector<int> iwls;
  for (double x : {0.0, 1.0, 2.0, 3.0}) {
    assign(y, Expr(scalar_f32(x)) + 1.5, kAutoflex);
    got.push_back(read1(y));
    iwls.push_back(y.iwl());
  }
  expect_pinned_trace(got, iwls);
  const AutoflexReport r = y.autoflex().report();
  EXPECT_EQ(r.writes, 4);
  EXPECT_EQ(r.overflow_writes, 1);
  EXPECT_EQ(r.saturated, 1u);
  EXPECT_EQ(r.min_iwl, 1);
  EXPECT_EQ(r.max_iwl, 3);
}

TEST(AutoflexWrites, PinnedTraceThroughDot) {
  Array y = Array::empty({1, 1}, DType::flex16, dev());
  const Array one = Array::full({1, 1}, 1.0, DType::flex16, dev());
  std::vector<double> got;
  std::vector<int> iwls;
  for (double x : {0.0, 1.0, 2.0, 3.0}) {
    const Array a = Array::full({1, 1}, x + 1.5, DType::flex16, dev());
    dot(a, one, y, {.iwl_policy = IwlPolicy::autoflex});
    got.push_back(read1(y));
    iwls.push_back(y.iwl());
  }
  expect_pinned_trace(got, iwls);
}

TEST(AutoflexWrites, PinnedTraceThroughTheConvolutions) {
  // A 1x1 convolution of one pixel is a product of two numbers in every direction.
  const ConvParams params{};
  const Array one_filter = Array::full({1, 1, 1, 1}, 1.0, DType::flex16, dev());
  const Array one_image = Array::full({1, 1, 1, 1}, 1.0, DType::flex16, dev());
  for (int direction = 0; direction < 3; ++direction) {
    SCOPED_TRACE(direction);
    Array y = Array::empty({1, 1, 1, 1}, DType::flex16, dev());
    std::vector<double> got;
    std::vector<int> iwls;
    for (double x : {0.0, 1.0, 2.0, 3.0}) {
      const Array v = Array::full({1, 1, 1, 1}, x + 1.5, DType::flex16, dev());
      const ConvOptions o{.iwl_policy = IwlPolicy::autoflex};
      if (direction == 0) fprop(v, one_filter, y, params, o);
      if (direction == 1) bprop(one_filter, v, y, params, o);
      if (direction == 2) update(one_image, v, y, params, o);
      got.push_back(read1(y));
      iwls.push_back(y.iwl());
    }
    expect_pinned_trace(got, iwls);
  }
}

// A tensor whose scale grows 8x at once and then holds: the write at the jump saturates, the
// range widens until nothing does, and from then on every write stores exactly what RNE at the
// manager's iwl gives. The iwls come from a host manager fed with statistics computed here.
TEST(AutoflexWrites, OverflowThenConvergenceMatchesAHostManager) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  const std::int64_t n = 1000;
  std::vector<float> base(n);
  for (float& v : base) v = unit(rng);
  Array y = Array::empty({n}, DType::flex16, dev());
  portable::AutoflexState host = portable::autoflex_initial();
  int saturating_writes = 0;
  for (int step = 0; step < 40; ++step) {
    const float scale = step < 10 ? 0.3f : 2.4f;
    std::vector<float> x(n);
    for (std::int64_t i = 0; i < n; ++i) x[i] = base[i] * scale * (1.0f + 0.01f * (step % 3));
    const Array xs = Array::from_floats(x, {n}, DType::f32, dev());
    assign(y, Expr(xs), kAutoflex);
    // The host's view of the same write.
    float top = 0;
    for (float v : x) top = std::max(top, std::fabs(v));
    const int iwl =
        portable::autoflex_wants_exact(host) ? portable::flex16_iwl_holding(top) : host.iwl;
    ASSERT_EQ(y.iwl(), iwl) << "step " << step;
    std::int32_t max_m = 0;
    std::uint64_t saturated = 0;
    const std::vector<float> got = y.to_floats();
    for (std::int64_t i = 0; i < n; ++i) {
      const portable::Flex16Code c = portable::flex16_encode(x[i], iwl);
      max_m = std::max<std::int32_t>(max_m, std::abs(static_cast<std::int32_t>(c.m)));
      saturated += c.saturated ? 1 : 0;
      ASSERT_EQ(static_cast<double>(got[i]), std::ldexp(static_cast<double>(c.m), iwl - 15))
          << "step " << step << " element " << i;
    }
    EXPECT_EQ(y.stats().saturated, saturated);
    portable::autoflex_record(host, iwl, max_m, saturated, 0);
    if (saturated) ++saturating_writes;
    if (step >= 14) {
      EXPECT_EQ(saturated, 0u) << "step " << step << ": still saturating";
    }
  }
  EXPECT_GE(saturating_writes, 1);
  const AutoflexReport r = y.autoflex().report();
  EXPECT_EQ(r.overflow_writes, saturating_writes);
  EXPECT_EQ(r.next_iwl, host.iwl);
  // Settled: the steady maximum (about 2.4) sits within the headroom's binade above it.
  EXPECT_EQ(r.next_iwl, 3);
}

TEST(AutoflexWrites, AManagerOutlivesTheArraysItServes) {
  Autoflex manager;
  std::vector<int> iwls;
  for (double x : {0.0, 1.0, 2.0, 3.0}) {
    Array y = Array::empty({1}, DType::flex16, dev());  // a fresh buffer every step
    y.set_autoflex(manager);
    assign(y, Expr(scalar_f32(x)) + 1.5, kAutoflex);
    iwls.push_back(y.iwl());
  }
  EXPECT_EQ(iwls, (std::vector<int>{1, 1, 3, 3}));
  EXPECT_EQ(manager.report().writes, 4);
  manager.reset();
  EXPECT_EQ(manager.report().writes, 0);
}

// y = y + 1 with y's range growing: the old value is re-expressed at the new iwl before it is
// read, so it keeps its value (a relabelled mantissa would read 8x larger).
TEST(AutoflexWrites, AWriteThatReadsItsOutputKeepsTheOldValues) {
  Array y = Array::empty({1}, DType::flex16, dev());
  assign(y, Expr(scalar_f32(1.0)), kAutoflex);  // iwl 1 (1.0 needs it)
  assign(y, Expr(y) + 1.0, kAutoflex);          // 2.0 saturates at iwl 1
  EXPECT_EQ(read1(y), 1.99993896484375);
  assign(y, Expr(y) + 1.0, kAutoflex);  // at iwl 3: 2.0 (rescaled, RNE) + 1
  EXPECT_EQ(y.iwl(), 3);
  EXPECT_EQ(read1(y), 3.0);
}

// Steady state, where the predicted iwl is the output's own: y = 0.5·y + 0.25·reversed(y) reads
// other elements of y than the one it writes, so it must read them as they were before the
// write (no snapshot is needed for the exponent, but one still is for the overlap), and at an
// exponent change both the overlap and the new scale are honoured.
TEST(AutoflexWrites, InPlaceUpdatesReadingOtherElementsOfTheOutput) {
  // Long enough that no backend evaluates it in one piece; dyadic values in (-1, 1).
  const std::int64_t n = 20000;
  std::vector<float> start(static_cast<std::size_t>(n));
  std::mt19937 rng(7);
  for (float& v : start) v = static_cast<float>(static_cast<int>(rng() % 127) - 63) / 64.0f;
  Array y = Array::empty({n}, DType::flex16, dev());
  assign(y, Expr(Array::from_floats(start, {n}, DType::f32, dev())), kAutoflex);
  std::vector<double> want(start.begin(), start.end());
  for (double& v : want) v = std::ldexp(std::nearbyint(std::ldexp(v, 15 - y.iwl())), y.iwl() - 15);
  int unchanged = 0, changed = 0;
  for (int step = 0; step < 6; ++step) {
    const int iwl_before = y.iwl();
    const double scale = step == 4 ? 8.0 : 1.0;  // step 4 overflows: the range moves
    assign(y, scale * (0.5 * Expr(y) + 0.25 * Expr(y.index("::-1"))), kAutoflex);
    std::vector<double> next(want.size());
    const int iwl = y.iwl();
    const double top = std::ldexp(32767.0, iwl - 15);
    for (std::size_t i = 0; i < want.size(); ++i) {
      const double v = scale * (0.5 * want[i] + 0.25 * want[want.size() - 1 - i]);
      const double m = std::nearbyint(std::ldexp(v, 15 - iwl));  // ties: the values avoid them
      next[i] = std::clamp(std::ldexp(m, iwl - 15), -top, top);
    }
    want = next;
    ++(iwl == iwl_before ? unchanged : changed);
    const std::vector<float> got = y.to_floats();
    for (std::size_t i = 0; i < want.size(); ++i)
      EXPECT_EQ(static_cast<double>(got[i]), want[i]) << "step " << step << ", element " << i;
  }
  EXPECT_GE(unchanged, 2);  // both paths were taken
  EXPECT_GE(changed, 1);
}

TEST(AutoflexWrites, APartialWriteLeavesTheRestOfTheStorage) {
  Array y = Array::empty({2}, DType::flex16, dev());
  Array first = y.index("0:1"), second = y.index("1:2");
  assign(y, Expr(scalar_f32(0.75)), kAutoflex);      // both 0.75, iwl 0
  assign(second, Expr(scalar_f32(3.0)), kAutoflex);  // saturates at iwl 0: next iwl 2
  assign(second, Expr(scalar_f32(3.0)), kAutoflex);  // at iwl 2; the first element rescaled
  EXPECT_EQ(y.iwl(), 2);
  EXPECT_EQ(y.to_floats(), (std::vector<float>{0.75f, 3.0f}));
}

TEST(AutoflexWrites, NaNIsCountedByTheManager) {
  Array y = Array::empty({3}, DType::flex16, dev());
  const Array x = Array::from_floats(std::vector<float>{1.0f, 0.0f, 2.0f}, {3}, DType::f32, dev());
  assign(y, Expr(x), kAutoflex);
  assign(y, Expr(x) / Expr(x), kAutoflex);  // 0/0 is NaN, stored as 0
  const AutoflexReport r = y.autoflex().report();
  EXPECT_EQ(r.nan_count, 1u);
  EXPECT_EQ(y.to_floats(), (std::vector<float>{1.0f, 0.0f, 1.0f}));
}

TEST(AutoflexWrites, TheReportNamesTheLabelOfTheFirstNaNWrite) {
  Array y = Array::empty({3}, DType::flex16, dev());
  const Array x = Array::from_floats(std::vector<float>{1.0f, 0.0f, 2.0f}, {3}, DType::f32, dev());
  assign(y, Expr(x) / Expr(x), kAutoflex);  // unlabelled: NaN, but no label to report
  EXPECT_EQ(y.autoflex().report().first_nan_label, -1);
  y.autoflex().reset();
  {
    const AutoflexWriteLabel step(7);
    assign(y, Expr(x), kAutoflex);
  }
  for (std::int64_t step : {8, 9}) {
    const AutoflexWriteLabel label(step);
    assign(y, Expr(x) / Expr(x), kAutoflex);  // NaN at both; the first is reported
  }
  assign(y, Expr(x), kAutoflex);  // taken after the label's scope ended: still step 9's
  const AutoflexReport r = y.autoflex().report();
  EXPECT_EQ(r.nan_count, 2u);
  EXPECT_EQ(r.first_nan_label, 8);
  {
    const AutoflexWriteLabel outer(3);
    { const AutoflexWriteLabel inner(4); }
    y.autoflex().reset();
    assign(y, Expr(x) / Expr(x), kAutoflex);  // the outer label is back in force
  }
  EXPECT_EQ(y.autoflex().report().first_nan_label, 3);
}

TEST(AutoflexWrites, BadOptionsAreClearErrors) {
  Array y = Array::empty({1}, DType::flex16, dev());
  EXPECT_THROW(assign(y, Expr(1.0), {.iwl_policy = IwlPolicy::autoflex, .iwl = 3}), ValueError);
  const Array a = Array::full({1, 1}, 1.0, DType::flex16, dev());
  EXPECT_THROW(dot(a, a, y.reshape({1, 1}), {.iwl_policy = IwlPolicy::autoflex, .iwl = 3}),
               ValueError);
  Array f = Array::empty({1, 1}, DType::f32, dev());
  EXPECT_THROW(dot(a, a, f, {.iwl_policy = IwlPolicy::autoflex}), DTypeError);
  EXPECT_THROW(Array::empty({1}, DType::f32).autoflex(), DTypeError);
  EXPECT_EQ(y.autoflex().report().writes, 0);  // nothing recorded by the failed calls
}

// The same sequence of writes on the CPU and on the device stores the same mantissas and ends
// in the same manager state, byte for byte.
TEST(AutoflexWrites, DeviceAndHostStoreTheSameBits) {
  if (!dev().is_cuda()) GTEST_SKIP() << "a host-only run (--device=cpu)";
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::int64_t m = 24, k = 40, n = 31;
  Array y_host = Array::empty({m, n}, DType::flex16);
  Array y_dev = Array::empty({m, n}, DType::flex16, dev());
  for (int step = 0; step < 12; ++step) {
    std::vector<float> av(m * k), bv(k * n);
    const float scale = step == 6 ? 20.0f : 1.0f;
    for (float& v : av) v = normal(rng) * scale;
    for (float& v : bv) v = normal(rng);
    const Array a = Array::from_floats(av, {m, k}, DType::flex16);
    const Array b = Array::from_floats(bv, {k, n}, DType::flex16);
    dot(a, b, y_host, {.iwl_policy = IwlPolicy::autoflex});
    dot(a.copy_to(dev()), b.copy_to(dev()), y_dev, {.iwl_policy = IwlPolicy::autoflex});
    assign(y_host, Expr(y_host) * 0.5 + 0.25, kAutoflex);
    assign(y_dev, Expr(y_dev) * 0.5 + 0.25, kAutoflex);
    ASSERT_EQ(y_host.iwl(), y_dev.iwl()) << "step " << step;
    ASSERT_EQ(y_host.to_vector<std::int16_t>(), y_dev.to_vector<std::int16_t>()) << "step " << step;
  }
  const portable::AutoflexState& h = y_host.autoflex().state();
  const portable::AutoflexState& d = y_dev.autoflex().state();
  EXPECT_EQ(std::memcmp(&h, &d, sizeof h), 0);
  EXPECT_GE(h.overflows, 1);
}

}  // namespace
