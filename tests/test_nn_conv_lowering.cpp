// The lowered f32 convolution (columns + matrix products, what CUDA runs for f32 layers)
// against the planned convolution kernels, forced on this test's device, for fprop, bprop and
// update over several geometries; and integer fprop and update over gathered taps (what CUDA runs
// for a first layer of few taps) against the planned kernels, bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "flexkit/conv.hpp"
#include "flexkit/expr.hpp"
#include "nn/heavy_ops.hpp"
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

void expect_same_flex16(const Array& got, const Array& want, const char* what) {
  ASSERT_EQ(got.dtype(), DType::flex16) << what;
  EXPECT_EQ(got.iwl(), want.iwl()) << what;
  const std::vector<std::int16_t> a = got.to_vector<std::int16_t>(),
                                  b = want.to_vector<std::int16_t>();
  ASSERT_EQ(a.size(), b.size()) << what;
  int bad = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i] && ++bad <= 3)
      ADD_FAILURE() << what << " element " << i << ": " << a[i] << " against " << b[i];
  EXPECT_EQ(bad, 0) << what;
  EXPECT_EQ(got.stats().max_abs_m, want.stats().max_abs_m) << what;
  EXPECT_EQ(got.stats().saturated, want.stats().saturated) << what;
}

// Integer fprop and update over the input's gathered taps (a 1×1 convolution over a
// (C·R·S, P, Q, B) input) give the planned kernels' mantissas, exponent and statistics: the same
// exact sums, rounded once. Full-range mantissas and an exponent one step too fine exercise
// rounding and saturation; beta = 1 the accumulating path (the old values at another exponent);
// u8 spikes the other input kind. The first case is csnn's first layer in small (one channel).
TEST(ConvLowering, IntegerProductsOverGatheredTapsAreTheSame) {
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
      // The exponents that hold the results, found by the exact policy, less one.
      Array probe_y = Array::zeros(plan.output_shape(), DType::flex16, device);
      nn::heavy::conv_fprop(plan, x, f, probe_y, false, ConvRoute::planned,
                            {.iwl_policy = IwlPolicy::exact});
      Array probe_f = Array::zeros(plan.filter_shape(), DType::flex16, device);
      nn::heavy::conv_update(plan, {x}, g, probe_f, {.iwl_policy = IwlPolicy::exact},
                             ConvRoute::planned);
      const bool first_layer = t.c == 1 && !spikes;  // what the automatic choice gathers on CUDA
      for (const double beta : {0.0, 1.0}) {
        const char* what = beta == 0.0 ? "beta 0" : "beta 1";
        const ConvOptions fprop_options{.beta = beta, .iwl = probe_y.iwl() - 1};
        const Array old_y = random_flex16(plan.output_shape(), probe_y.iwl() + 1, rng, device);
        Array y_taps = old_y.clone(), y_planned = old_y.clone(), y_automatic = old_y.clone();
        nn::heavy::conv_fprop(plan, x, f, y_taps, false, ConvRoute::lowered, fprop_options);
        nn::heavy::conv_fprop(plan, x, f, y_planned, false, ConvRoute::planned, fprop_options);
        expect_same_flex16(y_taps, y_planned, what);
        if (first_layer) {
          nn::heavy::conv_fprop(plan, x, f, y_automatic, false, ConvRoute::automatic,
                                fprop_options);
          expect_same_flex16(y_automatic, y_planned, "fprop, automatic");
        }

        const ConvOptions update_options{.beta = beta, .iwl = probe_f.iwl() - 1};
        const Array old_f = random_flex16(plan.filter_shape(), probe_f.iwl() + 1, rng, device);
        Array f_taps = old_f.clone(), f_planned = old_f.clone(), f_automatic = old_f.clone();
        nn::heavy::conv_update(plan, {x}, g, f_taps, update_options, ConvRoute::lowered);
        nn::heavy::conv_update(plan, {x}, g, f_planned, update_options, ConvRoute::planned);
        expect_same_flex16(f_taps, f_planned, what);
        if (first_layer) {
          nn::heavy::conv_update(plan, {x}, g, f_automatic, update_options);
          expect_same_flex16(f_automatic, f_planned, "update, automatic");
        }
      }
    }
  }
}

}  // namespace
