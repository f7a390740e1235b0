// The lowered f32 convolution (columns + matrix products, what CUDA runs for f32 layers)
// against the planned convolution kernels, forced on this test's device, for fprop, bprop and
// update over several geometries; and integer fprop and update over gathered taps (what CUDA runs
// for a first layer of few taps) against exact integer sums, bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

#include "flexkit/conv.hpp"
#include "flexkit/expr.hpp"
#include "nn/heavy_ops.hpp"
#include "support/flex16_reference.hpp"
#include "support/test_device.hpp"

using namespace flexkit;
using flexkit::nn::heavy::ConvRoute;

namespace {

Array random_array(const Shape& shape, std::mt19937& rng, Device device) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(shape_numel(shape)));
  for (float& x : v) x = u(rng);
  return Array::from_vector(v, shape, device);
}

// Two f32 summations of `terms` products each, in different orders: their rounding differs by
// about sqrt(terms) units.
void expect_close(const Array& a, const Array& b, const char* what, std::int64_t terms = 1) {
  const std::vector<float> x = a.to_floats(), y = b.to_floats();
  ASSERT_EQ(x.size(), y.size()) << what;
  const double scale = 1e-4 * std::max(1.0, std::sqrt(static_cast<double>(terms) / 1024.0));
  for (std::size_t i = 0; i < x.size(); ++i)
    ASSERT_NEAR(x[i], y[i], scale * (1 + std::fabs(y[i]))) << what << " at " << i;
}

struct Case {
  std::int64_t c, h, w, b, k, kernel, stride, pad;
};

TEST(ConvLowering, MatchesThePlannedKernels) {
  const Device device = test::device();
  std::mt19937 rng(5);
  for (const Case& t :
       {Case{3, 7, 6, 5, 4, 3, 1, 1}, Case{2, 9, 9, 4, 3, 3, 2, 0}, Case{4, 5, 5, 3, 6, 1, 1, 0},
        Case{1, 8, 7, 6, 5, 3, 2, 1}, Case{3, 6, 6, 2, 2, 2, 2, 0},
        // The input gradient's rectangles: a wide kernel, more padding than it needs, windows
        // that do not overlap, and input positions no window covers (their gradient is 0).
        Case{2, 9, 8, 3, 3, 5, 1, 2}, Case{2, 5, 6, 2, 3, 3, 1, 2}, Case{2, 9, 9, 2, 2, 3, 3, 0},
        Case{2, 7, 7, 2, 2, 1, 3, 0}, Case{2, 8, 9, 3, 2, 3, 2, 2},
        // Columns of 302 MB: the products run in bands (two of output rows forward, two of
        // input channels for the gradients).
        Case{16, 64, 64, 128, 8, 3, 1, 1}}) {
    SCOPED_TRACE(::testing::Message() << "c" << t.c << " k" << t.k << " kernel " << t.kernel
                                      << " stride " << t.stride << " pad " << t.pad);
    const ConvPlan plan({t.c, t.h, t.w, t.b}, {t.c, t.kernel, t.kernel, t.k},
                        {.padding = {t.pad}, .stride = {t.stride}});
    const Array x = random_array(plan.input_shape(), rng, device);
    const Array f = random_array(plan.filter_shape(), rng, device);
    const Array g = random_array(plan.output_shape(), rng, device);
    Array y_lowered = Array::empty(plan.output_shape(), DType::f32, device);
    Array y_planned = Array::empty(plan.output_shape(), DType::f32, device);
    const nn::heavy::ConvSaved saved =
        nn::heavy::conv_fprop(plan, x, f, y_lowered, true, ConvRoute::lowered);
    nn::heavy::conv_fprop(plan, x, f, y_planned, false, ConvRoute::planned);
    expect_close(y_lowered, y_planned, "fprop");

    Array gx_lowered = Array::empty(plan.input_shape(), DType::f32, device);
    Array gx_planned = Array::empty(plan.input_shape(), DType::f32, device);
    nn::heavy::conv_bprop(plan, f, g, gx_lowered, ConvRoute::lowered);
    nn::heavy::conv_bprop(plan, f, g, gx_planned, ConvRoute::planned);
    expect_close(gx_lowered, gx_planned, "bprop");

    // beta = 1 accumulates into what is there, as layers accumulate gradients.
    Array gf_lowered = Array::full(plan.filter_shape(), 0.25, DType::f32, device);
    Array gf_planned = Array::full(plan.filter_shape(), 0.25, DType::f32, device);
    nn::heavy::conv_update(plan, saved, g, gf_lowered, {.beta = 1.0}, ConvRoute::lowered);
    nn::heavy::conv_update(plan, {x}, g, gf_planned, {.beta = 1.0}, ConvRoute::planned);
    const std::int64_t positions = shape_numel(plan.output_shape()) / t.k;
    expect_close(gf_lowered, gf_planned, "update", positions);
    // beta = 0 overwrites.
    Array gf_overwritten = Array::full(plan.filter_shape(), 7.0, DType::f32, device);
    nn::heavy::conv_update(plan, {x}, g, gf_overwritten, {}, ConvRoute::lowered);
    Array gf_zero_start = Array::zeros(plan.filter_shape(), DType::f32, device);
    nn::heavy::conv_update(plan, {x}, g, gf_zero_start, {}, ConvRoute::planned);
    expect_close(gf_overwritten, gf_zero_start, "update, beta 0", positions);
  }
}

// Spikes reach the convolutions as u8 (0 or 1): the lowered form widens them as it gathers, and
// gives what f32 spikes give, in both directions that read the input.
TEST(ConvLowering, U8SpikesGiveTheF32Results) {
  const Device device = test::device();
  std::mt19937 rng(9);
  const ConvPlan plan({3, 7, 6, 5}, {3, 3, 3, 4}, {.padding = {1}, .stride = {2}});
  const Array spikes =
      evaluate(gt(Expr(random_array(plan.input_shape(), rng, device)), Expr(0.0)), DType::u8);
  const Array as_f32 = evaluate(Expr(spikes), DType::f32);
  const Array f = random_array(plan.filter_shape(), rng, device);
  const Array g = random_array(plan.output_shape(), rng, device);
  Array y_u8 = Array::empty(plan.output_shape(), DType::f32, device);
  Array y_f32 = Array::empty(plan.output_shape(), DType::f32, device);
  const nn::heavy::ConvSaved saved =
      nn::heavy::conv_fprop(plan, spikes, f, y_u8, true, ConvRoute::lowered);
  nn::heavy::conv_fprop(plan, as_f32, f, y_f32, false, ConvRoute::planned);
  expect_close(y_u8, y_f32, "fprop");
  Array gf_u8 = Array::zeros(plan.filter_shape(), DType::f32, device);
  Array gf_f32 = Array::zeros(plan.filter_shape(), DType::f32, device);
  nn::heavy::conv_update(plan, saved, g, gf_u8, {}, ConvRoute::lowered);
  nn::heavy::conv_update(plan, {as_f32}, g, gf_f32, {}, ConvRoute::planned);
  expect_close(gf_u8, gf_f32, "update");
}

Array random_flex16(const Shape& shape, int iwl, std::mt19937& rng, Device device) {
  std::uniform_int_distribution<int> u(-32768, 32767);
  std::vector<std::int16_t> m(static_cast<std::size_t>(shape_numel(shape)));
  for (std::int16_t& x : m) x = static_cast<std::int16_t>(u(rng));
  return Array::from_flex16(m, iwl, shape, device);
}

// The integers an operand holds: flex16 mantissas or u8 values.
std::vector<std::int64_t> integers(const Array& a) {
  std::vector<std::int64_t> out;
  if (a.dtype() == DType::u8) {
    for (std::uint8_t v : a.to_vector<std::uint8_t>()) out.push_back(v);
  } else {
    for (std::int16_t v : a.to_vector<std::int16_t>()) out.push_back(v);
  }
  return out;
}

// The exact integer sums of fprop (K, P, Q, B) and update (C, R, S, K), by the definition: four
// nested loops over (C, H, W, B) inputs and (C, R, S, K) filters with zero padding.
struct ExactSums {
  std::vector<std::int64_t> fprop, update;
};

ExactSums exact_sums(const Case& t, const ConvPlan& plan, const std::vector<std::int64_t>& x,
                     const std::vector<std::int64_t>& f, const std::vector<std::int64_t>& g) {
  const Shape& o = plan.output_shape();
  const std::int64_t P = o[1], Q = o[2], R = t.kernel, S = t.kernel;
  ExactSums sums{std::vector<std::int64_t>(static_cast<std::size_t>(shape_numel(o))),
                 std::vector<std::int64_t>(static_cast<std::size_t>(t.c * R * S * t.k))};
  for (std::int64_t c = 0; c < t.c; ++c)
    for (std::int64_t r = 0; r < R; ++r)
      for (std::int64_t s = 0; s < S; ++s)
        for (std::int64_t p = 0; p < P; ++p)
          for (std::int64_t q = 0; q < Q; ++q) {
            const std::int64_t y = p * t.stride - t.pad + r, xx = q * t.stride - t.pad + s;
            if (y < 0 || y >= t.h || xx < 0 || xx >= t.w) continue;
            for (std::int64_t b = 0; b < t.b; ++b) {
              const std::int64_t in =
                  x[static_cast<std::size_t>(((c * t.h + y) * t.w + xx) * t.b + b)];
              for (std::int64_t k = 0; k < t.k; ++k) {
                const auto out = static_cast<std::size_t>(((k * P + p) * Q + q) * t.b + b);
                const auto tap = static_cast<std::size_t>(((c * R + r) * S + s) * t.k + k);
                sums.fprop[out] += in * f[tap];
                sums.update[tap] += in * g[out];
              }
            }
          }
  return sums;
}

// The smallest exponent at which every sum rounds without saturating (test::ref_flex's rounding).
int exact_iwl(const std::vector<std::int64_t>& sums, int iwl_ab) {
  for (int iwl = -60; iwl < 80; ++iwl) {
    bool fits = true;
    for (std::int64_t v : sums)
      if (test::ref_flex({.iwl_ab = iwl_ab, .out_iwl = iwl}, v, 0).saturated) fits = false;
    if (fits) return iwl;
  }
  return 80;
}

// `got` against the reference rounding of `sums` at its exponent (alpha 1, beta 0 or 1 over
// `old`): mantissas, exponent and statistics.
void expect_reference(const Array& got, const std::vector<std::int64_t>& sums, int iwl_ab,
                      int out_iwl, double beta, const Array& old, const char* what) {
  ASSERT_EQ(got.dtype(), DType::flex16) << what;
  EXPECT_EQ(got.iwl(), out_iwl) << what;
  const std::vector<std::int16_t> m = got.to_vector<std::int16_t>(),
                                  before = old.to_vector<std::int16_t>();
  ASSERT_EQ(m.size(), sums.size()) << what;
  const test::Ref ref{.iwl_ab = iwl_ab, .beta = beta, .out_iwl = out_iwl, .old_iwl = old.iwl()};
  std::int32_t max_abs = 0;
  std::uint64_t saturated = 0;
  int bad = 0;
  for (std::size_t i = 0; i < sums.size(); ++i) {
    const test::RefFlex want = test::ref_flex(ref, sums[i], before[i]);
    max_abs = std::max<std::int32_t>(max_abs, std::abs(static_cast<std::int32_t>(want.m)));
    saturated += want.saturated;
    if (m[i] != want.m && ++bad <= 3)
      ADD_FAILURE() << what << " element " << i << ": " << m[i] << ", want " << want.m << " (sum "
                    << sums[i] << ")";
  }
  EXPECT_EQ(bad, 0) << what;
  EXPECT_EQ(got.stats().max_abs_m, max_abs) << what;
  EXPECT_EQ(got.stats().saturated, saturated) << what;
}

// Integer fprop and update over the input's gathered taps (a 1×1 convolution over a
// (C·R·S, P, Q, B) input) against the exact sums by definition, rounded by the test's own
// docs/flex16.md rounding: mantissas, exponent and statistics. Full-range mantissas and an
// exponent one step too fine exercise rounding and saturation; beta = 1 the accumulating path
// (the old values at another exponent); u8 spikes the other input kind. The first case is
// csnn's first layer in small (one channel), where the automatic choice on CUDA gathers too.
TEST(ConvLowering, IntegerProductsOverGatheredTapsMatchTheExactSums) {
  const Device device = test::device();
  std::mt19937 rng(13);
  for (const Case& t : {Case{1, 12, 10, 8, 16, 3, 1, 1}, Case{3, 7, 6, 16, 5, 3, 2, 1},
                        Case{2, 9, 9, 8, 3, 2, 1, 0}}) {
    for (const bool spikes : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "c" << t.c << " k" << t.k << " kernel " << t.kernel
                                        << (spikes ? " u8 input" : " flex16 input"));
      const ConvPlan plan({t.c, t.h, t.w, t.b}, {t.c, t.kernel, t.kernel, t.k},
                          {.padding = {t.pad}, .stride = {t.stride}});
      const Array x =
          spikes ? evaluate(gt(Expr(random_array(plan.input_shape(), rng, device)), Expr(0.0)),
                            DType::u8)
                 : random_flex16(plan.input_shape(), 2, rng, device);
      const Array f = random_flex16(plan.filter_shape(), -1, rng, device);
      const Array g = random_flex16(plan.output_shape(), -3, rng, device);
      const int iwl_x = spikes ? 15 : 2;  // a u8 value v is v · 2^(15 − 15)
      const ExactSums sums = exact_sums(t, plan, integers(x), integers(f), integers(g));
      const int fprop_iwl = exact_iwl(sums.fprop, iwl_x - 1) - 1;
      const int update_iwl = exact_iwl(sums.update, iwl_x - 3) - 1;
      const bool first_layer = t.c == 1 && !spikes;
      for (const double beta : {0.0, 1.0}) {
        const char* what = beta == 0.0 ? "beta 0" : "beta 1";
        const Array old_y = random_flex16(plan.output_shape(), fprop_iwl + 2, rng, device);
        Array y = old_y.clone();
        const nn::heavy::ConvSaved saved = nn::heavy::conv_fprop(
            plan, x, f, y, true, ConvRoute::lowered, {.beta = beta, .iwl = fprop_iwl});
        expect_reference(y, sums.fprop, iwl_x - 1, fprop_iwl, beta, old_y, what);
        // The taps fprop gathered are kept for the update.
        ASSERT_TRUE(saved.taps.defined()) << what;
        EXPECT_EQ(saved.taps.shape(), (Shape{t.c * t.kernel * t.kernel, plan.output_shape()[1],
                                             plan.output_shape()[2], t.b}));

        const Array old_f = random_flex16(plan.filter_shape(), update_iwl + 2, rng, device);
        for (const bool reuse : {false, true}) {  // gathered again, or fprop's taps
          Array gf = old_f.clone();
          const nn::heavy::ConvSaved given = reuse ? saved : nn::heavy::ConvSaved{x};
          nn::heavy::conv_update(plan, given, g, gf, {.beta = beta, .iwl = update_iwl},
                                 ConvRoute::lowered);
          expect_reference(gf, sums.update, iwl_x - 3, update_iwl, beta, old_f,
                           reuse ? "update over fprop's taps" : what);
        }

        if (first_layer) {  // the automatic choice: over the taps on CUDA, planned on the CPU
          Array y_auto = old_y.clone(), gf_auto = old_f.clone();
          nn::heavy::conv_fprop(plan, x, f, y_auto, false, ConvRoute::automatic,
                                {.beta = beta, .iwl = fprop_iwl});
          expect_reference(y_auto, sums.fprop, iwl_x - 1, fprop_iwl, beta, old_y, "automatic");
          nn::heavy::conv_update(plan, {x}, g, gf_auto, {.beta = beta, .iwl = update_iwl});
          expect_reference(gf_auto, sums.update, iwl_x - 3, update_iwl, beta, old_f, "automatic");
        }
      }
    }
  }
}

}  // namespace
