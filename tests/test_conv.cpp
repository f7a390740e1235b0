// Convolution (fprop, bprop, update) against a direct loop-nest reference written here: exact
// integers for flex16 and u8 (bit-exact after the docs/flex16.md rounding), float64 for f32. Sweeps
// 1-3 spatial dims × kernel sizes × padding × stride × dilation × upscale on small shapes, then a
// few large cases once; checks bprop / update as adjoints of fprop (exact integer identity for
// flex16, finite differences for f32), beta, the iwl policies, statistics, views, the layout
// helpers, the plan cache and the refusals. Every test runs on the device of the run
// (--device=cpu|cuda); the cuda run also checks that CPU and CUDA give bit-identical flex16
// results for the same operands.
#include <gtest/gtest.h>

#include <algorithm>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "flexkit/conv.hpp"
#include "flexkit/error.hpp"
#include "support/flex16_reference.hpp"
#include "support/integer_arrays.hpp"
#include "support/kernel_names.hpp"
#include "support/test_device.hpp"

namespace flexkit {
namespace {

using test::flex_array;
using test::Ints;
using test::random_ints;
using test::u8_array;
using Arr3 = std::array<std::int64_t, 3>;

// ---- geometry and the reference loop nest -------------------------------------------------
// Always 3 spatial dims internally; `dims` says how many the arrays carry (the leading ones are
// size 1 and left out of the shapes).
struct Geo {
  int dims = 2;
  std::int64_t C = 1, K = 1, N = 1;
  Arr3 in{1, 1, 1}, flt{1, 1, 1}, pad{0, 0, 0}, str{1, 1, 1}, dil{1, 1, 1}, up{1, 1, 1};

  Arr3 out() const {
    Arr3 o{};
    for (int d = 0; d < 3; ++d)
      o[d] = (in[d] * up[d] + 2 * pad[d] - dil[d] * (flt[d] - 1) - 1) / str[d] + 1;
    return o;
  }
  Shape shape(std::int64_t outer, const Arr3& sp, std::int64_t inner) const {
    Shape s{outer};
    for (int d = 3 - dims; d < 3; ++d) s.push_back(sp[d]);
    s.push_back(inner);
    return s;
  }
  Shape input_shape() const { return shape(C, in, N); }
  Shape filter_shape() const { return shape(C, flt, K); }
  Shape output_shape() const { return shape(K, out(), N); }
  std::vector<std::int64_t> list(const Arr3& v) const {
    return std::vector<std::int64_t>(v.begin() + (3 - dims), v.end());
  }
  ConvParams params() const { return {list(pad), list(str), list(dil), list(up)}; }
  std::int64_t input_size() const { return C * in[0] * in[1] * in[2] * N; }
  std::int64_t filter_size() const { return C * flt[0] * flt[1] * flt[2] * K; }
  std::int64_t output_size() const {
    Arr3 o = out();
    return K * o[0] * o[1] * o[2] * N;
  }
  std::string str_() const {
    std::string s = "dims " + std::to_string(dims) + " C" + std::to_string(C) + " K" +
                    std::to_string(K) + " N" + std::to_string(N);
    for (int d = 3 - dims; d < 3; ++d)
      s += " [in " + std::to_string(in[d]) + " f " + std::to_string(flt[d]) + " pad " +
           std::to_string(pad[d]) + " str " + std::to_string(str[d]) + " dil " +
           std::to_string(dil[d]) + " up " + std::to_string(up[d]) + "]";
    return s;
  }
};

// Row-major flat indices of the seed's layouts.
std::int64_t at_in(const Geo& g, std::int64_t c, std::int64_t x0, std::int64_t x1, std::int64_t x2,
                   std::int64_t n) {
  return (((c * g.in[0] + x0) * g.in[1] + x1) * g.in[2] + x2) * g.N + n;
}
std::int64_t at_flt(const Geo& g, std::int64_t c, std::int64_t t, std::int64_t r, std::int64_t s,
                    std::int64_t k) {
  return (((c * g.flt[0] + t) * g.flt[1] + r) * g.flt[2] + s) * g.K + k;
}
std::int64_t at_out(const Geo& g, std::int64_t k, std::int64_t m, std::int64_t p, std::int64_t q,
                    std::int64_t n) {
  Arr3 o = g.out();
  return (((k * o[0] + m) * o[1] + p) * o[2] + q) * g.N + n;
}

// Calls term(i_index, f_index, o_index) for every product I·F that contributes to O: the
// definition of include/flexkit/gemm.hpp and conv.hpp written as one loop nest (upscaled input,
// zero padding), nothing else.
template <typename Term>
void for_each_term(const Geo& g, Term&& term) {
  Arr3 o = g.out();
  for (std::int64_t k = 0; k < g.K; ++k)
    for (std::int64_t m = 0; m < o[0]; ++m)
      for (std::int64_t p = 0; p < o[1]; ++p)
        for (std::int64_t q = 0; q < o[2]; ++q)
          for (std::int64_t c = 0; c < g.C; ++c)
            for (std::int64_t t = 0; t < g.flt[0]; ++t)
              for (std::int64_t r = 0; r < g.flt[1]; ++r)
                for (std::int64_t s = 0; s < g.flt[2]; ++s) {
                  const std::int64_t u0 = m * g.str[0] - g.pad[0] + t * g.dil[0];
                  const std::int64_t u1 = p * g.str[1] - g.pad[1] + r * g.dil[1];
                  const std::int64_t u2 = q * g.str[2] - g.pad[2] + s * g.dil[2];
                  if (u0 < 0 || u1 < 0 || u2 < 0 || u0 >= g.in[0] * g.up[0] ||
                      u1 >= g.in[1] * g.up[1] || u2 >= g.in[2] * g.up[2])
                    continue;
                  for (std::int64_t n = 0; n < g.N; ++n)
                    term(at_in(g, c, u0 / g.up[0], u1 / g.up[1], u2 / g.up[2], n),
                         at_flt(g, c, t, r, s, k), at_out(g, k, m, p, q, n));
                }
}

enum class Dir { fprop, bprop, update };

// The reference accumulators of one direction (T: int64 exact, or double) and, for double, the
// sums of |terms| (the scale of the f32 rounding error).
template <typename T>
std::vector<T> reference(const Geo& g, Dir dir, const std::vector<T>& in, const std::vector<T>& flt,
                         const std::vector<T>& grad, std::vector<T>* abs_sum = nullptr) {
  std::size_t size = dir == Dir::fprop   ? static_cast<std::size_t>(g.output_size())
                     : dir == Dir::bprop ? static_cast<std::size_t>(g.input_size())
                                         : static_cast<std::size_t>(g.filter_size());
  std::vector<T> acc(size, T{0});
  if (abs_sum) abs_sum->assign(size, T{0});
  for_each_term(g, [&](std::int64_t i, std::int64_t f, std::int64_t o) {
    T v;
    std::int64_t at;
    if (dir == Dir::fprop) {
      v = in[i] * flt[f], at = o;
    } else if (dir == Dir::bprop) {
      v = flt[f] * grad[o], at = i;
    } else {
      v = in[i] * grad[o], at = f;
    }
    acc[at] += v;
    if (abs_sum) (*abs_sum)[at] += v < 0 ? -v : v;
  });
  return acc;
}

// ---- the docs/flex16.md rounding, independently (support/flex16_reference.hpp)
using test::Ref;
using test::ref_flex;
using test::RefFlex;

// The smallest output iwl at which every accumulator stores unsaturated (alpha 1, beta 0).
int ref_exact_iwl(const Ints& acc, int iwl_ab) {
  bool any = false;
  for (auto a : acc) any = any || a != 0;
  if (!any) return 0;
  for (int iwl = -111; iwl <= 127; ++iwl) {
    Ref r;
    r.iwl_ab = iwl_ab;
    r.out_iwl = iwl;
    bool fits = true;
    for (auto a : acc) fits = fits && !ref_flex(r, a, 0).saturated;
    if (fits) return iwl;
  }
  return 127;
}

// ---- data ---------------------------------------------------------------------------------
std::vector<double> random_reals(std::int64_t count, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> u(-1 << 20, 1 << 20);  // exactly representable in f32
  std::vector<double> v(static_cast<std::size_t>(count));
  for (auto& x : v) x = std::ldexp(static_cast<double>(u(rng)), -20);
  return v;
}

Array f32_array(const std::vector<double>& v, const Shape& shape) {
  std::vector<float> f(v.begin(), v.end());
  return Array::from_vector(f, shape, test::device());
}
Ints ints_of(const Array& x) {
  auto v = x.to_vector<std::int16_t>();
  return Ints(v.begin(), v.end());
}
std::vector<double> reals_of(const Array& x) {
  return x.to_doubles();
}

// ---- one configuration, every direction and type ------------------------------------------
// Runs fprop, bprop and update of `g` in flex16 (the input u8 when `spikes`) and in f32 and
// compares each with the reference. Returns the number of mismatching elements.
int check_config(const Geo& g, unsigned seed, bool spikes) {
  int bad = 0;
  const Shape si = g.input_shape(), sf = g.filter_shape(), so = g.output_shape();
  // -- flex16: full-range mantissas, so the rounding of long exact sums is exercised.
  const Ints in = spikes ? random_ints(g.input_size(), 0, 255, seed)
                         : random_ints(g.input_size(), -32768, 32767, seed);
  const Ints flt = random_ints(g.filter_size(), -32768, 32767, seed + 1);
  const Ints grad = random_ints(g.output_size(), -32768, 32767, seed + 2);
  const int iwl_in = spikes ? 15 : 3, iwl_f = -2, iwl_e = 5;
  Array I = spikes ? u8_array(in, si) : flex_array(in, iwl_in, si);
  Array F = flex_array(flt, iwl_f, sf);
  Array E = flex_array(grad, iwl_e, so);
  for (Dir dir : {Dir::fprop, Dir::bprop, Dir::update}) {
    if (dir == Dir::bprop && spikes) continue;  // bprop has no input operand
    const Ints acc = reference<std::int64_t>(g, dir, in, flt, grad);
    Ref r;
    r.iwl_ab = dir == Dir::fprop   ? iwl_in + iwl_f
               : dir == Dir::bprop ? iwl_f + iwl_e
                                   : iwl_in + iwl_e;
    // One below the smallest saturation-free exponent (when there is any value), so that both
    // rounding and saturation are exercised.
    r.out_iwl = ref_exact_iwl(acc, r.iwl_ab) - 1;
    const Shape shape = dir == Dir::fprop ? so : dir == Dir::bprop ? si : sf;
    Array out = Array::zeros(shape, DType::flex16, test::device());
    ConvOptions o;
    o.iwl = r.out_iwl;
    if (dir == Dir::fprop) fprop(I, F, out, g.params(), o);
    if (dir == Dir::bprop) bprop(F, E, out, g.params(), o);
    if (dir == Dir::update) update(I, E, out, g.params(), o);
    const Ints got = ints_of(out);
    std::int32_t max_abs = 0;
    std::uint64_t saturated = 0;
    for (std::size_t i = 0; i < acc.size(); ++i) {
      const RefFlex want = ref_flex(r, acc[i], 0);
      max_abs = std::max<std::int32_t>(max_abs, std::abs(static_cast<std::int32_t>(want.m)));
      saturated += want.saturated;
      if (got[i] != want.m && ++bad <= 3)
        ADD_FAILURE() << "flex16 dir " << static_cast<int>(dir) << " element " << i << ": got "
                      << got[i] << ", want " << want.m << " (acc " << acc[i] << ")";
    }
    EXPECT_EQ(out.iwl(), r.out_iwl);
    EXPECT_EQ(out.stats().max_abs_m, max_abs);
    EXPECT_EQ(out.stats().saturated, saturated);
  }
  // -- f32 against float64.
  const auto fin = random_reals(g.input_size(), seed + 3);
  const auto fflt = random_reals(g.filter_size(), seed + 4);
  const auto fgrad = random_reals(g.output_size(), seed + 5);
  Array If = f32_array(fin, si), Ff = f32_array(fflt, sf), Ef = f32_array(fgrad, so);
  for (Dir dir : {Dir::fprop, Dir::bprop, Dir::update}) {
    std::vector<double> abs_sum;
    const auto acc = reference<double>(g, dir, fin, fflt, fgrad, &abs_sum);
    const Shape shape = dir == Dir::fprop ? so : dir == Dir::bprop ? si : sf;
    Array out = Array::empty(shape, DType::f32, test::device());
    if (dir == Dir::fprop) fprop(If, Ff, out, g.params());
    if (dir == Dir::bprop) bprop(Ff, Ef, out, g.params());
    if (dir == Dir::update) update(If, Ef, out, g.params());
    const auto got = reals_of(out);
    for (std::size_t i = 0; i < acc.size(); ++i) {
      const double tol = 2e-6 * abs_sum[i] + 1e-30;
      if (std::abs(got[i] - acc[i]) > tol && ++bad <= 3)
        ADD_FAILURE() << "f32 dir " << static_cast<int>(dir) << " element " << i << ": got "
                      << got[i] << ", want " << acc[i] << " ± " << tol;
    }
  }
  return bad;
}

// Input extent along one dim: the smallest that fits the filter, plus `extra`.
std::int64_t fitting_input(std::int64_t taps, std::int64_t pad, std::int64_t dil, std::int64_t up,
                           std::int64_t extra) {
  const std::int64_t extent = dil * (taps - 1) + 1;
  const std::int64_t need = std::max<std::int64_t>(extent - 2 * pad, 1);
  return (need + up - 1) / up + extra;
}

TEST(Conv, OutputSizeFollowsTheStandardFormula) {
  // include/flexkit/gemm.hpp and conv.hpp: 227 with an 11-tap filter at stride 4 gives 55 (the
  // seed's variant disagreed).
  EXPECT_EQ(conv_output_shape({3, 227, 227, 2}, {3, 11, 11, 8}, {{0}, {4}, {}, {}}),
            (Shape{8, 55, 55, 2}));
  EXPECT_EQ(conv_output_shape({1, 10, 1}, {1, 3, 1}, {{1}, {2}, {2}, {3}}),
            (Shape{1, 14, 1}));  // floor((10·3 + 2 − 4 − 1) / 2) + 1
  EXPECT_EQ(conv_output_shape({2, 5, 6, 7, 3}, {2, 3, 3, 3, 4}, {{1, 0, 2}, {1, 2, 3}, {}, {}}),
            (Shape{4, 5, 2, 3, 3}));
}

TEST(Conv, SpecDiscriminatorIsExact) {
  // A 1×1 convolution over 3 channels is a dot product: exact integer sum 1 (fp32 gives 0).
  Array I = flex_array({32767, -32767, 1}, 15, {3, 1, 1});
  Array F = flex_array({32767, 32767, 1}, 15, {3, 1, 1});
  Array O = Array::zeros({1, 1, 1}, DType::flex16, test::device());
  ConvOptions o;
  o.iwl = 15;
  fprop(I, F, O, {}, o);
  EXPECT_EQ(ints_of(O), (Ints{1}));
}

// The full grid: dims × kernel size × padding × stride × dilation × upscale, with C, K, N and
// the spatial extents cycling through small values, flex16 (u8 spikes on alternate cases) and
// f32, all three directions.
TEST(Conv, GridAgainstDirectReference) {
  const std::int64_t channel_sizes[] = {1, 3, 8, 17, 64};
  int index = 0, failures = 0, configs = 0;
  int wide[3] = {0, 0, 0};  // configs with C, K, N = 64
  for (int dims : {1, 2, 3})
    for (std::int64_t ks : {1, 3, 5, 7})
      for (std::int64_t pad : {0, 1, 2})
        for (std::int64_t str : {1, 2})
          for (std::int64_t dil : {1, 2})
            for (std::int64_t up : {1, 2}) {
              if (pad > dil * (ks - 1)) continue;  // padding beyond the filter: refused
              // 3-d with the largest kernels only on a sample (the reference is the cost).
              if (dims == 3 && ks >= 5 && (index % 4) != 0) {
                ++index;
                continue;
              }
              Geo g;
              g.dims = dims;
              const int i = index++;
              g.C = channel_sizes[i % 5];
              g.K = channel_sizes[(i / 5 + 1) % 5];
              g.N = channel_sizes[(i / 25 + 2) % 5];
              if (std::max({g.C, g.K, g.N}) == 64) {  // one wide extent at a time
                const std::int64_t wide = g.C == 64 ? 0 : g.K == 64 ? 1 : 2;
                if (wide != 0) g.C = std::min<std::int64_t>(g.C, 8);
                if (wide != 1) g.K = std::min<std::int64_t>(g.K, 8);
                if (wide != 2) g.N = std::min<std::int64_t>(g.N, 8);
              }
              if (dims == 3) {  // keep the 3-d reference small
                g.C = std::min<std::int64_t>(g.C, 3);
                g.K = std::min<std::int64_t>(g.K, 3);
                g.N = std::min<std::int64_t>(g.N, 3);
              }
              for (int d = 3 - dims; d < 3; ++d) {
                // Rectangular filters in several dims: the last dim uses ks, the others vary.
                g.flt[d] = d == 2 ? ks : std::max<std::int64_t>(1, ks - 2 * (2 - d));
                g.pad[d] = std::min(pad, dil * (g.flt[d] - 1));
                g.str[d] = str;
                g.dil[d] = dil;
                g.up[d] = up;
                g.in[d] =
                    fitting_input(g.flt[d], g.pad[d], dil, up, (i + d) % 4 + (dims == 1 ? 5 : 1));
              }
              SCOPED_TRACE(g.str_());
              failures += check_config(g, 1000 + static_cast<unsigned>(i), i % 2 == 1);
              ++configs;
              wide[0] += g.C == 64, wide[1] += g.K == 64, wide[2] += g.N == 64;
              if (failures > 20) FAIL() << "stopping after " << failures << " mismatches";
            }
  EXPECT_EQ(failures, 0);
  EXPECT_GT(configs, 200);  // the grid really ran
  for (int w : wide) EXPECT_GE(w, 10);
}

TEST(Conv, LargeCasesOnce) {
  {  // AlexNet's first layer geometry: 227 → 55 with an 11×11 filter at stride 4.
    Geo g;
    g.dims = 2;
    g.C = 3, g.K = 8, g.N = 2;
    g.in = {1, 227, 227};
    g.flt = {1, 11, 11};
    g.str = {1, 4, 4};
    ASSERT_EQ(g.output_shape(), (Shape{8, 55, 55, 2}));
    SCOPED_TRACE(g.str_());
    EXPECT_EQ(check_config(g, 7, false), 0);
  }
  {  // Wide channels: C = K = 64, 3×3, padding 1.
    Geo g;
    g.dims = 2;
    g.C = 64, g.K = 64, g.N = 3;
    g.in = {1, 9, 10};
    g.flt = {1, 3, 3};
    g.pad = {0, 1, 1};
    SCOPED_TRACE(g.str_());
    EXPECT_EQ(check_config(g, 8, false), 0);
    EXPECT_EQ(check_config(g, 9, true), 0);
  }
  {  // A batch of 64 and a long update reduction (several slices and chunks).
    Geo g;
    g.dims = 1;
    g.C = 5, g.K = 17, g.N = 64;
    g.in = {1, 1, 300};
    g.flt = {1, 1, 5};
    g.pad = {0, 0, 2};
    SCOPED_TRACE(g.str_());
    EXPECT_EQ(check_config(g, 10, false), 0);
  }
}

// Shapes the CUDA backend runs on the tensor cores (implicit GEMM: batch a multiple of 8, or 16
// for u8 spikes, filter rows 16-byte aligned, no upscale): channel counts below, at and past the
// 64-channel stage with partial last stages, 1-3 dims, strides (bprop's strided gather),
// dilation, padding, tiles cut by the matrix edge, K split across CTAs or not, u8 spikes, batches
// of 16, 32, 64 and 256. On the CPU the same cases check the lowering once more.
TEST(Conv, TensorCoreShapesAgainstDirectReference) {
  struct Case {
    int dims;
    std::int64_t C, K, N, in, flt, pad, str, dil;
    bool spikes;
  };
  const Case cases[] = {
      {2, 8, 8, 8, 6, 3, 1, 1, 1, false},
      {2, 17, 16, 8, 7, 3, 1, 2, 1, false},
      {2, 64, 8, 16, 5, 3, 1, 1, 2, true},
      {2, 72, 136, 16, 6, 3, 0, 1, 1, false},
      {2, 130, 16, 8, 4, 3, 1, 1, 1, false},
      {2, 8, 16, 64, 9, 5, 2, 2, 1, false},
      {2, 16, 24, 32, 8, 1, 0, 1, 1, true},
      {2, 24, 8, 16, 11, 7, 3, 2, 1, false},
      {1, 64, 64, 16, 40, 5, 2, 1, 1, false},
      {1, 17, 8, 8, 30, 3, 1, 2, 2, true},
      {3, 8, 8, 8, 5, 3, 1, 1, 1, false},
      {3, 16, 8, 16, 6, 3, 1, 2, 1, true},
      {2, 8, 8, 64, 17, 3, 1, 1, 1, false},    // 153 column tiles: no split of K
      {1, 8, 16, 64, 600, 3, 1, 1, 1, false},  // update: a reduction of 38 464 (> one 32 768 chunk)
      {2, 24, 16, 256, 4, 3, 1, 1, 1, false},  // tiles of 128 batch entries of one position
      // 1×1 layers of at most four 64-channel stages (the shallow persistent kernel): three
      // column tiles per CTA and a last tile row of 44 rows (fprop), four stages and a single
      // tile row of 72 (fprop) with two tile rows in bprop, u8 spikes over four partial stages;
      // a bprop of 48 rows over three stages with two or three column tiles per CTA (the
      // warp-specialised kernel's tiles of two units, a consumer idle in each), whose fprop has a
      // last tile row of 8; a bprop of 12 rows, where a warp's 16 rows are partly inside (its
      // lanes must agree on the staged stores).
      {2, 40, 300, 16, 32, 1, 0, 1, 1, false},
      {2, 256, 72, 8, 12, 1, 0, 1, 1, false},
      {2, 200, 136, 16, 10, 1, 0, 1, 1, true},
      {2, 48, 136, 32, 36, 1, 0, 1, 1, false},
      {2, 12, 32, 16, 12, 1, 0, 1, 1, false},
      // An update of 64 × 300 sums, more than the deep-K workspace halves hold after the cases
      // above: they grow (queued calls finish, new zeroed halves), between calls that alternate.
      {2, 64, 300, 8, 12, 1, 0, 1, 1, false},
      // The warp-specialised kernel's bulk tensor stores (the input is in × (in + 1)), with
      // three consumers over one stage (C40 K56) and two over two or three stages (C136 K72):
      // a last column tile of 80 columns (9x10 N8: the map leaves out the rest) and of 64 (8x9
      // N8: a 64-column unit wholly past the end stores nothing); a single tile of 112 columns
      // (7x8 N2); rows of 84 columns (6x7 N2), a stride the map cannot take (168 bytes), stored
      // from the registers.
      {2, 40, 56, 8, 9, 1, 0, 1, 1, false},
      {2, 136, 72, 8, 9, 1, 0, 1, 1, false},
      {2, 40, 56, 8, 8, 1, 0, 1, 1, false},
      {2, 136, 72, 8, 8, 1, 0, 1, 1, false},
      {2, 40, 56, 2, 7, 1, 0, 1, 1, false},
      {2, 136, 72, 2, 7, 1, 0, 1, 1, false},
      {2, 40, 56, 2, 6, 1, 0, 1, 1, false},
      {2, 136, 72, 2, 6, 1, 0, 1, 1, false},
      // B by bulk tensor loads (the warp-specialised kernel, where the gathered operand is a
      // plain matrix of a multiple of 16 channels): 648 columns (9x9 N8), the last tile's
      // second box wholly past the end; 48 channels in a stage of 64 (fprop of C48), 208 over
      // four stages (fprop of C208, two consumers), 96 over two (its bprop, two tile rows).
      {2, 48, 64, 8, 9, 1, 0, 1, 1, false},
      {2, 208, 96, 8, 9, 1, 0, 1, 1, false},
      // The transposed shallow kernel (at most 64 output rows over a plain gathered operand,
      // activations in the wgmmas' registers): fprop of C256 K24 and bprop of C24 K256, 24 rows
      // over four stages, 406 tiles of 64 positions, so that some consumers take two tiles and
      // their rings of four stages wrap around. (Also above: fprop of C48 K64 over one partial
      // stage, bprop of C12 K32 and of C48 K64; the ties test below: 64 rows over four stages.)
      {2, 256, 24, 32, 28, 1, 0, 1, 1, false},
      {2, 24, 256, 32, 28, 1, 0, 1, 1, false},
      // Its wide form (up to 256 output rows over one stage, by 64-row quarters): bprop of C208
      // K48, four quarters, the last of 16 rows (the fprop of C48 K136 above: three, the last of
      // 8; the ties test's fprop of C64 K256: four whole ones).
      {2, 208, 48, 16, 28, 1, 0, 1, 1, false},
      // 1×1 updates of at most 64 rows on one side (the deep-K kernel): K the larger side, with
      // two K ranges per CTA's worth of 32 768 (C48 K136 above, k 42 624) or three 128-row tiles
      // (C40 K300 above); C the larger side (C300 K40, the sides swapped); one input channel
      // and a K of 3.75 stages.
      {2, 300, 40, 8, 20, 1, 0, 1, 1, false},
      {2, 1, 70, 8, 5, 1, 0, 1, 1, false},
  };
  int failures = 0, index = 0;
  for (const Case& c : cases) {
    Geo g;
    g.dims = c.dims;
    g.C = c.C, g.K = c.K, g.N = c.N;
    for (int d = 3 - c.dims; d < 3; ++d) {
      g.flt[d] = c.flt;
      g.pad[d] = c.pad;
      g.str[d] = c.str;
      g.dil[d] = c.dil;
      g.in[d] = c.in + (d == 2 ? 1 : 0);  // rectangular
    }
    SCOPED_TRACE(g.str_());
    failures += check_config(g, 3000 + static_cast<unsigned>(index++), c.spikes);
  }
  EXPECT_EQ(failures, 0);
}

// 1x1, C64 → K over 9x10 positions and a batch of 8: one to four 64-deep stages either way.
Geo shallow_geo(std::int64_t K) {
  Geo g;
  g.dims = 2;
  g.C = 64, g.K = K, g.N = 8;
  g.in = {1, 9, 10};
  return g;
}

// A 1x1 fprop (I, F) or bprop (F, E) stored at `shift` (the output iwl 15 + shift − iwl_ab below
// the operands'), checked on the shallow kernels (named by the plan where no kernel is forced)
// against the exact sums `acc`: every element, the largest |m| and the saturation count. Returns
// the reference's saturation count.
std::int64_t check_shallow(const Geo& g, Dir dir, const Array& I, const Array& F, const Array& E,
                           int iwl_ab, int shift, const Ints& acc) {
  SCOPED_TRACE("dir " + std::to_string(static_cast<int>(dir)) + " shift " + std::to_string(shift));
  Ref r;
  r.iwl_ab = iwl_ab;
  r.out_iwl = iwl_ab - 15 + shift;
  const bool forward = dir == Dir::fprop;
  Array out =
      Array::zeros(forward ? g.output_shape() : g.input_shape(), DType::flex16, test::device());
  ConvOptions o;
  o.iwl = r.out_iwl;
  const std::string kernel = conv_kernel_name(forward ? ConvDirection::fprop : ConvDirection::bprop,
                                              forward ? I : F, forward ? F : E, out, g.params(), o);
  if (test::device().is_cuda() && test::env_or_empty("FLEXKIT_CONV_KERNEL").empty() &&
      kernel != "cuda.direct") {
    EXPECT_EQ(kernel.rfind("cuda.implicit_gemm.shallow", 0), 0u) << kernel;
  }
  if (forward) fprop(I, F, out, g.params(), o);
  if (!forward) bprop(F, E, out, g.params(), o);
  const Ints got = ints_of(out);
  std::int64_t bad = 0, saturated = 0;
  std::int32_t max_abs = 0;
  for (std::size_t i = 0; i < acc.size(); ++i) {
    const RefFlex want = ref_flex(r, acc[i], 0);
    saturated += want.saturated ? 1 : 0;
    max_abs = std::max<std::int32_t>(max_abs, std::abs(static_cast<std::int32_t>(want.m)));
    if (got[i] != want.m && ++bad <= 3)
      ADD_FAILURE() << "element " << i << ": got " << got[i] << ", want " << want.m << " (acc "
                    << acc[i] << ")";
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(out.stats().max_abs_m, max_abs);
  EXPECT_EQ(out.stats().saturated, static_cast<std::uint64_t>(saturated));
  return saturated;
}

// Data made of ties, which random full-range data meets about once in 2^16 values: the shallow
// kernels' rounding from three byte products must still take the even neighbour. 1x1 layers of
// C64 (fprop K256 over one stage: two consumers; fprop K56: three; their bprops of 64 rows over
// four stages and one) with weights of ±16384 and small activations, so that every sum is a
// multiple of 2^14 and a tenth to a quarter of them are ties at a shift of 16 (fprop) or 30 and
// 31 (bprop), of both parities, beside a warp's 16 rows with none (zero weights).
TEST(Conv, ShallowKernelsRoundTiesToEven) {
  for (const std::int64_t K : {256, 56}) {
    SCOPED_TRACE("K " + std::to_string(K));
    const Geo g = shallow_geo(K);
    Ints in = random_ints(g.input_size(), -3, 3, 41);
    Ints flt = random_ints(g.filter_size(), -1, 1, 42);
    Ints grad = random_ints(g.output_size(), -1, 1, 43);
    for (auto& v : flt) v *= 16384;
    for (auto& v : grad) v *= 16384;
    // Filter layout (C, 1, 1, K): output channels 16 … 31 (fprop) and input channels 16 … 31
    // (bprop) see only zero weights, a warp's 16 rows without a tie.
    for (std::int64_t c = 0; c < g.C; ++c)
      for (std::int64_t k = 0; k < K; ++k)
        if ((k >= 16 && k < 32) || (c >= 16 && c < 32))
          flt[static_cast<std::size_t>(c * K + k)] = 0;
    const int iwl_in = 3, iwl_f = -2, iwl_e = 5;
    Array I = flex_array(in, iwl_in, g.input_shape()), F = flex_array(flt, iwl_f, g.filter_shape());
    Array E = flex_array(grad, iwl_e, g.output_shape());
    for (Dir dir : {Dir::fprop, Dir::bprop}) {
      const Ints acc = reference<std::int64_t>(g, dir, in, flt, grad);
      const int iwl_ab = dir == Dir::fprop ? iwl_in + iwl_f : iwl_f + iwl_e;
      for (int shift : dir == Dir::fprop ? std::vector<int>{16} : std::vector<int>{30, 31}) {
        std::int64_t ties = 0, odd_ties = 0;
        for (const std::int64_t a : acc) {
          const std::int64_t unit = std::int64_t{1} << shift;
          const std::int64_t t = a + unit / 2;
          const bool tie = ((t % unit) + unit) % unit == 0;
          ties += tie ? 1 : 0;
          odd_ties += tie && (((t >> shift) & 1) != 0) ? 1 : 0;
        }
        EXPECT_GT(ties, static_cast<std::int64_t>(acc.size()) / 16);  // ties of both parities
        EXPECT_GT(odd_ties, 0);
        EXPECT_LT(odd_ties, ties);
        EXPECT_EQ(check_shallow(g, dir, I, F, E, iwl_ab, shift, acc), 0);
      }
    }
  }
}

// The shallow kernels at shifts from the lowest they take to 15 (a first layer's exponents sit
// there): full-range activations and 11-bit weights, so that at shift 10 most sums saturate, at 13
// some and at 15 few (fprop, and bprop of the same sizes).
TEST(Conv, ShallowKernelsAtShiftsBelowSixteen) {
  for (const std::int64_t K : {256, 56}) {
    SCOPED_TRACE("K " + std::to_string(K));
    const Geo g = shallow_geo(K);
    const Ints in = random_ints(g.input_size(), -32768, 32767, 51);
    const Ints flt = random_ints(g.filter_size(), -1024, 1024, 52);
    const Ints grad = random_ints(g.output_size(), -32768, 32767, 53);
    const int iwl_in = 2, iwl_f = -1, iwl_e = 4;
    Array I = flex_array(in, iwl_in, g.input_shape()), F = flex_array(flt, iwl_f, g.filter_shape());
    Array E = flex_array(grad, iwl_e, g.output_shape());
    for (Dir dir : {Dir::fprop, Dir::bprop}) {
      const Ints acc = reference<std::int64_t>(g, dir, in, flt, grad);
      const int iwl_ab = dir == Dir::fprop ? iwl_in + iwl_f : iwl_f + iwl_e;
      const auto size = static_cast<std::int64_t>(acc.size());
      EXPECT_GT(check_shallow(g, dir, I, F, E, iwl_ab, 10, acc), size / 2);
      check_shallow(g, dir, I, F, E, iwl_ab, 13, acc);
      EXPECT_LT(check_shallow(g, dir, I, F, E, iwl_ab, 15, acc), size / 10);
    }
  }
}

// The exact iwl policy's measure pass through the same paths.
TEST(Conv, ExactPolicyOnTensorCoreShapes) {
  Geo g;
  g.dims = 2;
  g.C = 72, g.K = 16, g.N = 16;
  g.in = {1, 6, 7};
  g.flt = {1, 3, 3};
  g.pad = {0, 1, 1};
  g.str = {1, 2, 2};
  const Ints in = random_ints(g.input_size(), -32768, 32767, 21);
  const Ints flt = random_ints(g.filter_size(), -32768, 32767, 22);
  const Ints grad = random_ints(g.output_size(), -32768, 32767, 23);
  Array I = flex_array(in, 1, g.input_shape()), F = flex_array(flt, 2, g.filter_shape());
  Array E = flex_array(grad, -1, g.output_shape());
  ConvOptions o;
  o.iwl_policy = IwlPolicy::exact;
  for (Dir dir : {Dir::fprop, Dir::bprop, Dir::update}) {
    const Ints acc = reference<std::int64_t>(g, dir, in, flt, grad);
    const Shape shape = dir == Dir::fprop   ? g.output_shape()
                        : dir == Dir::bprop ? g.input_shape()
                                            : g.filter_shape();
    Array out = Array::zeros(shape, DType::flex16, test::device());
    if (dir == Dir::fprop) fprop(I, F, out, g.params(), o);
    if (dir == Dir::bprop) bprop(F, E, out, g.params(), o);
    if (dir == Dir::update) update(I, E, out, g.params(), o);
    Ref r;
    r.iwl_ab = dir == Dir::fprop ? 3 : dir == Dir::bprop ? 1 : 0;
    r.out_iwl = ref_exact_iwl(acc, r.iwl_ab);
    EXPECT_EQ(out.iwl(), r.out_iwl);
    EXPECT_EQ(out.stats().saturated, 0u);
    const Ints got = ints_of(out);
    for (std::size_t i = 0; i < acc.size(); ++i) ASSERT_EQ(got[i], ref_flex(r, acc[i], 0).m) << i;
  }
}

// <fprop(I, F), E> = <I, bprop(F, E)> = <F, update(I, E)>: with small integers, unit exponents
// and scale 0 every output mantissa is its exact accumulator, so the identity holds exactly.
TEST(Conv, BpropAndUpdateAreExactAdjointsOfFprop) {
  int index = 0;
  for (int dims : {1, 2, 3})
    for (bool spikes : {false, true}) {
      Geo g;
      g.dims = dims;
      g.C = 3, g.K = 4, g.N = 2;
      for (int d = 3 - dims; d < 3; ++d) {
        g.flt[d] = 3;
        g.pad[d] = (index + d) % 3;
        g.str[d] = 1 + (index + d) % 2;
        g.dil[d] = 1 + d % 2;
        g.up[d] = 1 + (index + d + 1) % 2;
        g.in[d] = 5 + d;
      }
      ++index;
      SCOPED_TRACE(g.str_());
      const Ints in = spikes ? random_ints(g.input_size(), 0, 3, 20 + index)
                             : random_ints(g.input_size(), -3, 3, 20 + index);
      const Ints flt = random_ints(g.filter_size(), -3, 3, 40 + index);
      const Ints grad = random_ints(g.output_size(), -3, 3, 60 + index);
      Array I = spikes ? u8_array(in, g.input_shape()) : flex_array(in, 15, g.input_shape());
      Array F = flex_array(flt, 15, g.filter_shape());
      Array E = flex_array(grad, 15, g.output_shape());
      ConvOptions o;
      o.iwl = 15;  // scale = 15 + 15 − 30 = 0
      auto dot = [](const Ints& a, const Ints& b) {
        std::int64_t s = 0;
        for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
        return s;
      };
      Array O = Array::zeros(g.output_shape(), DType::flex16, test::device());
      fprop(I, F, O, g.params(), o);
      EXPECT_EQ(O.stats().saturated, 0u);
      const std::int64_t lhs = dot(ints_of(O), grad);
      EXPECT_NE(lhs, 0);
      Array dF = Array::zeros(g.filter_shape(), DType::flex16, test::device());
      update(I, E, dF, g.params(), o);
      EXPECT_EQ(dF.stats().saturated, 0u);
      EXPECT_EQ(dot(flt, ints_of(dF)), lhs);
      if (!spikes) {
        Array dI = Array::zeros(g.input_shape(), DType::flex16, test::device());
        bprop(F, E, dI, g.params(), o);
        EXPECT_EQ(dI.stats().saturated, 0u);
        EXPECT_EQ(dot(in, ints_of(dI)), lhs);
      }
    }
}

// f32: bprop and update against central differences of L(I, F) = <fprop(I, F), E>, summed in
// float64, at a few random elements.
TEST(Conv, Float32GradientsMatchFiniteDifferences) {
  Geo g;
  g.dims = 2;
  g.C = 3, g.K = 5, g.N = 2;
  g.in = {1, 7, 6};
  g.flt = {1, 3, 2};
  g.pad = {0, 1, 1};
  g.str = {1, 2, 1};
  g.dil = {1, 1, 2};
  g.up = {1, 1, 2};
  const auto in = random_reals(g.input_size(), 1), flt = random_reals(g.filter_size(), 2),
             grad = random_reals(g.output_size(), 3);
  Array E = f32_array(grad, g.output_shape());
  auto loss = [&](const std::vector<double>& i, const std::vector<double>& f) {
    Array O = Array::empty(g.output_shape(), DType::f32, test::device());
    fprop(f32_array(i, g.input_shape()), f32_array(f, g.filter_shape()), O, g.params());
    const auto o = reals_of(O);
    double s = 0;
    for (std::size_t k = 0; k < o.size(); ++k) s += o[k] * grad[k];
    return s;
  };
  Array dI = Array::empty(g.input_shape(), DType::f32, test::device());
  bprop(f32_array(flt, g.filter_shape()), E, dI, g.params());
  Array dF = Array::empty(g.filter_shape(), DType::f32, test::device());
  update(f32_array(in, g.input_shape()), E, dF, g.params());
  const auto gi = reals_of(dI), gf = reals_of(dF);
  std::mt19937 rng(4);
  const double h = 2.0;  // L is linear in each argument: the difference is exact up to f32 rounding
  for (int trial = 0; trial < 6; ++trial) {
    const std::size_t i = rng() % in.size(), f = rng() % flt.size();
    auto plus = in, minus = in;
    plus[i] += h, minus[i] -= h;
    EXPECT_NEAR((loss(plus, flt) - loss(minus, flt)) / (2 * h), gi[i], 1e-4) << "input " << i;
    auto fplus = flt, fminus = flt;
    fplus[f] += h, fminus[f] -= h;
    EXPECT_NEAR((loss(in, fplus) - loss(in, fminus)) / (2 * h), gf[f], 1e-4) << "filter " << f;
  }
}

Geo small_geo() {
  Geo g;
  g.dims = 2;
  g.C = 3, g.K = 4, g.N = 5;
  g.in = {1, 6, 7};
  g.flt = {1, 3, 3};
  g.pad = {0, 1, 1};
  return g;
}

TEST(Conv, BetaAccumulatesAndAlphaScales) {
  const Geo g = small_geo();
  const Ints in = random_ints(g.input_size(), -32768, 32767, 5);
  const Ints flt = random_ints(g.filter_size(), -32768, 32767, 6);
  const Ints old = random_ints(g.output_size(), -32768, 32767, 7);
  const Ints acc = reference<std::int64_t>(g, Dir::fprop, in, flt, {});
  Array I = flex_array(in, 2, g.input_shape()), F = flex_array(flt, 1, g.filter_shape());
  // flex16: out = 0.5 · conv + 1 · old, at a new iwl.
  Array O = flex_array(old, 14, g.output_shape());
  ConvOptions o;
  o.alpha = 0.5;
  o.beta = 1.0;
  o.iwl = 17;
  fprop(I, F, O, g.params(), o);
  Ref r;
  r.iwl_ab = 3, r.alpha = 0.5, r.beta = 1.0, r.out_iwl = 17, r.old_iwl = 14;
  const Ints got = ints_of(O);
  for (std::size_t i = 0; i < acc.size(); ++i)
    ASSERT_EQ(got[i], ref_flex(r, acc[i], static_cast<std::int16_t>(old[i])).m) << i;
  // f32: out = conv + 2 · old.
  const auto fin = random_reals(g.input_size(), 8), fflt = random_reals(g.filter_size(), 9),
             fold = random_reals(g.output_size(), 10);
  std::vector<double> abs_sum;
  const auto facc = reference<double>(g, Dir::fprop, fin, fflt, {}, &abs_sum);
  Array Of = f32_array(fold, g.output_shape());
  ConvOptions of;
  of.beta = 2.0;
  fprop(f32_array(fin, g.input_shape()), f32_array(fflt, g.filter_shape()), Of, g.params(), of);
  const auto fgot = reals_of(Of);
  for (std::size_t i = 0; i < facc.size(); ++i)
    ASSERT_NEAR(fgot[i], facc[i] + 2 * fold[i], 4e-6 * (abs_sum[i] + 2 * std::abs(fold[i]))) << i;
}

// update finishes its accumulators itself (not through gemm_cpu): the same beta / alpha rules.
TEST(Conv, UpdateBetaAccumulatesAndAlphaScales) {
  const Geo g = small_geo();
  const Ints in = random_ints(g.input_size(), 0, 255, 30);  // spikes
  const Ints grad = random_ints(g.output_size(), -32768, 32767, 31);
  const Ints old = random_ints(g.filter_size(), -32768, 32767, 32);
  const Ints acc = reference<std::int64_t>(g, Dir::update, in, {}, grad);
  Array dF = flex_array(old, 9, g.filter_shape());
  ConvOptions o;
  o.alpha = -0.75;
  o.beta = 0.5;
  o.iwl = 12;
  update(u8_array(in, g.input_shape()), flex_array(grad, -4, g.output_shape()), dF, g.params(), o);
  Ref r;
  r.iwl_ab = 11, r.alpha = -0.75, r.beta = 0.5, r.out_iwl = 12, r.old_iwl = 9;
  const Ints got = ints_of(dF);
  for (std::size_t i = 0; i < acc.size(); ++i)
    ASSERT_EQ(got[i], ref_flex(r, acc[i], static_cast<std::int16_t>(old[i])).m) << i;
  const auto fin = random_reals(g.input_size(), 33), fgrad = random_reals(g.output_size(), 34),
             fold = random_reals(g.filter_size(), 35);
  std::vector<double> abs_sum;
  const auto facc = reference<double>(g, Dir::update, fin, {}, fgrad, &abs_sum);
  Array dFf = f32_array(fold, g.filter_shape());
  ConvOptions of;
  of.alpha = 3.0;
  of.beta = 2.0;
  update(f32_array(fin, g.input_shape()), f32_array(fgrad, g.output_shape()), dFf, g.params(), of);
  const auto fgot = reals_of(dFf);
  for (std::size_t i = 0; i < facc.size(); ++i)
    ASSERT_NEAR(fgot[i], 3 * facc[i] + 2 * fold[i], 4e-6 * (3 * abs_sum[i] + 2 * std::abs(fold[i])))
        << i;
}

// bprop through the same rules, at stride 1 (written in place) and stride 2 (each residue class
// of input positions is computed into a compact block, which must start from the old values).
TEST(Conv, BpropBetaAccumulatesAndAlphaScales) {
  for (std::int64_t stride : {1, 2}) {
    SCOPED_TRACE(::testing::Message() << "stride " << stride);
    Geo g = small_geo();
    g.in = {1, 7, 9};  // odd extents: classes of different sizes
    g.str = {1, stride, stride};
    const Ints flt = random_ints(g.filter_size(), -32768, 32767, 40);
    const Ints grad = random_ints(g.output_size(), -32768, 32767, 41);
    const Ints old = random_ints(g.input_size(), -32768, 32767, 42);
    const Ints acc = reference<std::int64_t>(g, Dir::bprop, {}, flt, grad);
    Array dI = flex_array(old, 6, g.input_shape());
    ConvOptions o;
    o.alpha = 0.5;
    o.beta = -1.0;
    o.iwl = 16;
    bprop(flex_array(flt, 2, g.filter_shape()), flex_array(grad, -1, g.output_shape()), dI,
          g.params(), o);
    Ref r;
    r.iwl_ab = 1, r.alpha = 0.5, r.beta = -1.0, r.out_iwl = 16, r.old_iwl = 6;
    const Ints got = ints_of(dI);
    for (std::size_t i = 0; i < acc.size(); ++i)
      ASSERT_EQ(got[i], ref_flex(r, acc[i], static_cast<std::int16_t>(old[i])).m) << i;
    const auto fflt = random_reals(g.filter_size(), 43), fgrad = random_reals(g.output_size(), 44),
               fold = random_reals(g.input_size(), 45);
    std::vector<double> abs_sum;
    const auto facc = reference<double>(g, Dir::bprop, {}, fflt, fgrad, &abs_sum);
    Array dIf = f32_array(fold, g.input_shape());
    ConvOptions of;
    of.alpha = 2.0;
    of.beta = 0.25;
    bprop(f32_array(fflt, g.filter_shape()), f32_array(fgrad, g.output_shape()), dIf, g.params(),
          of);
    const auto fgot = reals_of(dIf);
    for (std::size_t i = 0; i < facc.size(); ++i)
      ASSERT_NEAR(fgot[i], 2 * facc[i] + 0.25 * fold[i],
                  4e-6 * (2 * abs_sum[i] + 0.25 * std::abs(fold[i])))
          << i;
  }
}

TEST(Conv, ExactPolicyPicksTheSmallestExponentThatHolds) {
  const Geo g = small_geo();
  const Ints in = random_ints(g.input_size(), -32768, 32767, 11);
  const Ints flt = random_ints(g.filter_size(), -32768, 32767, 12);
  const Ints grad = random_ints(g.output_size(), -32768, 32767, 13);
  Array I = flex_array(in, 0, g.input_shape()), F = flex_array(flt, 4, g.filter_shape());
  Array E = flex_array(grad, -3, g.output_shape());
  ConvOptions o;
  o.iwl_policy = IwlPolicy::exact;
  struct Case {
    Dir dir;
    int iwl_ab;
    Shape shape;
  };
  for (const Case& c : {Case{Dir::fprop, 4, g.output_shape()}, Case{Dir::bprop, 1, g.input_shape()},
                        Case{Dir::update, -3, g.filter_shape()}}) {
    const Ints acc = reference<std::int64_t>(g, c.dir, in, flt, grad);
    Array out = Array::zeros(c.shape, DType::flex16, test::device());
    if (c.dir == Dir::fprop) fprop(I, F, out, g.params(), o);
    if (c.dir == Dir::bprop) bprop(F, E, out, g.params(), o);
    if (c.dir == Dir::update) update(I, E, out, g.params(), o);
    Ref r;
    r.iwl_ab = c.iwl_ab;
    r.out_iwl = ref_exact_iwl(acc, c.iwl_ab);
    EXPECT_EQ(out.iwl(), r.out_iwl);
    EXPECT_EQ(out.stats().saturated, 0u);
    const Ints got = ints_of(out);
    for (std::size_t i = 0; i < acc.size(); ++i) ASSERT_EQ(got[i], ref_flex(r, acc[i], 0).m) << i;
  }
}

// Inputs as strided views (NCHW transposed without a copy), outputs that are slices (staged
// through a contiguous copy) and a grad_output view for update.
TEST(Conv, StridedViewsInAndOut) {
  const Geo g = small_geo();
  const Ints in = random_ints(g.input_size(), -32768, 32767, 14);
  const Ints flt = random_ints(g.filter_size(), -32768, 32767, 15);
  const Ints grad = random_ints(g.output_size(), -32768, 32767, 16);
  Array I = flex_array(in, 0, g.input_shape()), F = flex_array(flt, 0, g.filter_shape());
  Array E = flex_array(grad, 0, g.output_shape());
  // The same input held as NCHW and viewed as CHWN.
  Array I_nchw = from_conv_layout(I);
  Array I_view = I_nchw.transpose({1, 2, 3, 0});
  ASSERT_FALSE(I_view.is_contiguous());
  ConvOptions o;
  o.iwl = 20;
  Array want = Array::zeros(g.output_shape(), DType::flex16, test::device());
  fprop(I, F, want, g.params(), o);
  Array got = Array::zeros(g.output_shape(), DType::flex16, test::device());
  fprop(I_view, F, got, g.params(), o);
  EXPECT_EQ(ints_of(got), ints_of(want));
  // An output slice along N inside a wider array (its axes do not collapse into a matrix), with
  // beta accumulating into it; the untouched batch entries must stay as they were.
  Shape wide = g.output_shape();
  wide.back() = g.N + 2;
  const Ints wide_old = random_ints(shape_numel(wide), -1000, 1000, 17);
  Array big = flex_array(wide_old, 20, wide);
  Array slice = big.index("..., 1:" + std::to_string(g.N + 1));
  ConvOptions ob = o;
  ob.beta = 1.0;
  fprop(I, F, slice, g.params(), ob);
  Array want_b = flex_array(wide_old, 20, wide).index("..., 1:" + std::to_string(g.N + 1)).clone();
  fprop(I, F, want_b, g.params(), ob);
  EXPECT_EQ(ints_of(slice), ints_of(want_b));
  const Ints all = ints_of(big);
  const std::int64_t outer = shape_numel(wide) / wide.back();
  for (std::int64_t i = 0; i < outer; ++i) {
    EXPECT_EQ(all[i * wide.back()], wide_old[i * wide.back()]);
    EXPECT_EQ(all[i * wide.back() + wide.back() - 1], wide_old[i * wide.back() + wide.back() - 1]);
  }
  // update with grad_output and grad_filter as views.
  Array dF_want = Array::zeros(g.filter_shape(), DType::flex16, test::device());
  update(I, E, dF_want, g.params(), o);
  Array E_view = from_conv_layout(E).transpose({1, 2, 3, 0});
  Array dF_wide = Array::zeros({g.C, 3, 3, g.K * 2}, DType::flex16, test::device());
  Array dF_view = dF_wide.index("..., ::2");
  update(I_view, E_view, dF_view, g.params(), o);
  EXPECT_EQ(ints_of(dF_view), ints_of(dF_want));
  // bprop into a reversed view.
  Array dI_want = Array::zeros(g.input_shape(), DType::flex16, test::device());
  bprop(F, E, dI_want, g.params(), o);
  Array dI_store = Array::zeros(g.input_shape(), DType::flex16, test::device());
  Array dI_view = dI_store.index("::-1");
  bprop(F, E, dI_view, g.params(), o);
  EXPECT_EQ(ints_of(dI_view), ints_of(dI_want));
}

TEST(Conv, RepeatedRunsAreBitIdentical) {
  Geo g;
  g.dims = 2;
  g.C = 17, g.K = 8, g.N = 3;
  g.in = {1, 12, 11};
  g.flt = {1, 3, 3};
  g.pad = {0, 1, 1};
  g.str = {1, 2, 1};
  const auto fin = random_reals(g.input_size(), 18), fflt = random_reals(g.filter_size(), 19),
             fgrad = random_reals(g.output_size(), 20);
  Array I = f32_array(fin, g.input_shape()), F = f32_array(fflt, g.filter_shape()),
        E = f32_array(fgrad, g.output_shape());
  auto run = [&](Dir dir) {
    const Shape s = dir == Dir::fprop   ? g.output_shape()
                    : dir == Dir::bprop ? g.input_shape()
                                        : g.filter_shape();
    Array out = Array::empty(s, DType::f32, test::device());
    if (dir == Dir::fprop) fprop(I, F, out, g.params());
    if (dir == Dir::bprop) bprop(F, E, out, g.params());
    if (dir == Dir::update) update(I, E, out, g.params());
    return out.to_vector<float>();
  };
  for (Dir dir : {Dir::fprop, Dir::bprop, Dir::update}) {
    const auto first = run(dir);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(run(dir), first);
  }
}

// f32 results must not depend on how the CPU work was cut, and the cut depends on the thread
// count, which is fixed for a process. So CTest runs this test in two processes
// (tests/thread_count_independence.cmake, FLEXKIT_NUM_THREADS=1 and then 3): with
// FLEXKIT_TEST_RESULTS_MODE=record it writes every output's bits to FLEXKIT_TEST_RESULTS_FILE,
// with =compare it checks them against that file. Without those variables it compares two runs
// in this process.
TEST(Conv, F32ResultsDoNotDependOnTheThreadCount) {
  std::vector<Geo> geos(3);
  // A 1x1 layer with fewer filter rows than one microkernel panel: its update cuts the output
  // channels when threads would otherwise idle.
  geos[0].C = 8, geos[0].K = 64, geos[0].N = 8;
  geos[0].in = {1, 20, 20};
  geos[1].C = 17, geos[1].K = 24, geos[1].N = 5;
  geos[1].in = {1, 13, 12};
  geos[1].flt = {1, 3, 3};
  geos[1].pad = {0, 1, 1};
  geos[2] = geos[1];
  geos[2].C = 9, geos[2].K = 16, geos[2].N = 3;
  geos[2].in = {1, 15, 14};
  geos[2].str = {1, 2, 2};
  auto results = [&] {
    std::vector<std::uint32_t> bits;
    unsigned seed = 40;
    for (const Geo& g : geos) {
      const Array I = f32_array(random_reals(g.input_size(), ++seed), g.input_shape());
      const Array F = f32_array(random_reals(g.filter_size(), ++seed), g.filter_shape());
      const Array E = f32_array(random_reals(g.output_size(), ++seed), g.output_shape());
      Array O = Array::empty(g.output_shape(), DType::f32, test::device());
      Array dI = Array::empty(g.input_shape(), DType::f32, test::device());
      Array dF = Array::empty(g.filter_shape(), DType::f32, test::device());
      fprop(I, F, O, g.params());
      bprop(F, E, dI, g.params());
      update(I, E, dF, g.params());
      for (const Array* a : {&O, &dI, &dF}) {
        const std::vector<float> v = a->to_vector<float>();
        const std::size_t at = bits.size();
        bits.resize(at + v.size());
        std::memcpy(bits.data() + at, v.data(), v.size() * sizeof(float));
      }
    }
    return bits;
  };
  const std::vector<std::uint32_t> bits = results();
  const char* path = std::getenv("FLEXKIT_TEST_RESULTS_FILE");
  const char* mode = std::getenv("FLEXKIT_TEST_RESULTS_MODE");
  if (path == nullptr || mode == nullptr) {
    EXPECT_EQ(results(), bits);
    return;
  }
  const std::string m = mode;
  ASSERT_TRUE(m == "record" || m == "compare") << "FLEXKIT_TEST_RESULTS_MODE=" << m;
  if (m == "record") {
    std::FILE* f = std::fopen(path, "wb");
    ASSERT_NE(f, nullptr) << path;
    const std::size_t written = std::fwrite(bits.data(), sizeof(std::uint32_t), bits.size(), f);
    ASSERT_EQ(std::fclose(f), 0);
    ASSERT_EQ(written, bits.size());
    return;
  }
  std::FILE* f = std::fopen(path, "rb");
  ASSERT_NE(f, nullptr) << "no recorded results in " << path;
  std::vector<std::uint32_t> recorded(bits.size() + 1);
  const std::size_t read = std::fread(recorded.data(), sizeof(std::uint32_t), recorded.size(), f);
  std::fclose(f);
  recorded.resize(read);
  EXPECT_EQ(recorded, bits) << "f32 results differ from the run with another thread count";
}

TEST(Conv, PlansAreReusableAndCached) {
  const Geo g = small_geo();
  ConvPlan plan(g.input_shape(), g.filter_shape(), g.params());
  EXPECT_EQ(plan.spatial_dims(), 2);
  EXPECT_EQ(plan.output_shape(), g.output_shape());
  EXPECT_EQ(plan.params().stride, (std::vector<std::int64_t>{1, 1}));
  EXPECT_GT(plan.workspace_bytes(ConvDirection::fprop, DType::flex16), 0u);
  EXPECT_GT(plan.workspace_bytes(ConvDirection::update, DType::f32), 0u);
  // The same geometry spelled two ways is one cached plan.
  auto a = conv_plan(g.input_shape(), g.filter_shape(), {{1}, {1}, {}, {}});
  auto b = conv_plan(g.input_shape(), g.filter_shape(), {{1, 1}, {}, {1, 1}, {1}});
  EXPECT_EQ(a.get(), b.get());
  // A plan runs many times with different data.
  for (unsigned seed : {21u, 22u}) {
    const Ints in = random_ints(g.input_size(), -32768, 32767, seed);
    const Ints flt = random_ints(g.filter_size(), -32768, 32767, seed + 10);
    Array O1 = Array::zeros(g.output_shape(), DType::flex16, test::device());
    Array O2 = Array::zeros(g.output_shape(), DType::flex16, test::device());
    ConvOptions o;
    o.iwl = 21;
    plan.fprop(flex_array(in, 0, g.input_shape()), flex_array(flt, 0, g.filter_shape()), O1, o);
    fprop(flex_array(in, 0, g.input_shape()), flex_array(flt, 0, g.filter_shape()), O2, g.params(),
          o);
    EXPECT_EQ(ints_of(O1), ints_of(O2));
  }
}

TEST(Conv, LayoutHelpers) {
  // NCHW (2, 3, 4, 5) → CHWN (3, 4, 5, 2): element [n, c, h, w] lands at [c, h, w, n].
  std::vector<float> v(2 * 3 * 4 * 5);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  Array x = Array::from_vector(v, {2, 3, 4, 5}, test::device());
  Array y = to_conv_layout(x);
  ASSERT_EQ(y.shape(), (Shape{3, 4, 5, 2}));
  EXPECT_TRUE(y.is_contiguous());
  const auto yv = y.to_vector<float>();
  for (int n = 0; n < 2; ++n)
    for (int c = 0; c < 3; ++c)
      for (int h = 0; h < 4; ++h)
        for (int w = 0; w < 5; ++w)
          ASSERT_EQ(yv[((c * 4 + h) * 5 + w) * 2 + n], v[((n * 3 + c) * 4 + h) * 5 + w]);
  EXPECT_EQ(from_conv_layout(y).to_vector<float>(), v);
  // Weights (K, C, T, R, S) → (C, T, R, S, K), flex16 keeps its exponent.
  Array wt = flex_array(random_ints(4 * 3 * 2 * 2 * 2, -100, 100, 23), 7, {4, 3, 2, 2, 2});
  Array f = to_conv_layout(wt);
  EXPECT_EQ(f.shape(), (Shape{3, 2, 2, 2, 4}));
  EXPECT_EQ(f.iwl(), 7);
  EXPECT_EQ(ints_of(from_conv_layout(f)), ints_of(wt));
  // NCW works; rank 2 does not.
  EXPECT_EQ(to_conv_layout(Array::zeros({2, 3, 4}, DType::f32, test::device())).shape(),
            (Shape{3, 4, 2}));
  EXPECT_THROW(to_conv_layout(Array::zeros({2, 3}, DType::f32, test::device())), ShapeError);
}

// An empty batch (N = 0), as PyTorch allows: fprop and bprop have empty outputs; update's sums
// have no terms, so grad_filter becomes beta · grad_filter (zeros for beta = 0).
TEST(Conv, EmptyBatch) {
  const Device d = test::device();
  const Shape in{3, 6, 6, 0}, flt{3, 3, 3, 4};
  const ConvPlan plan(in, flt, {{1}, {}, {}, {}});
  ASSERT_EQ(plan.output_shape(), (Shape{4, 6, 6, 0}));
  const std::int64_t filter_size = 3 * 3 * 3 * 4;
  for (DType t : {DType::f32, DType::flex16}) {
    SCOPED_TRACE(dtype_name(t));
    Array I = Array::zeros(in, t, d), E = Array::zeros(plan.output_shape(), t, d);
    Array F = Array::zeros(flt, t, d);
    Array O = Array::zeros(plan.output_shape(), t, d), GI = Array::zeros(in, t, d);
    plan.fprop(I, F, O);
    plan.bprop(F, E, GI);
    std::vector<std::int16_t> m(static_cast<std::size_t>(filter_size));
    for (std::size_t i = 0; i < m.size(); ++i) m[i] = static_cast<std::int16_t>(2 * i - 100);
    std::vector<float> v(m.begin(), m.end());
    Array GF = t == DType::f32 ? Array::from_vector(v, flt, d) : Array::from_flex16(m, 15, flt, d);
    ConvOptions half;
    half.beta = 0.5;
    plan.update(I, E, GF, half);
    if (t == DType::f32) {
      const auto got = GF.to_vector<float>();
      for (std::size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], 0.5f * v[i]) << i;
    } else {
      const auto got = GF.to_vector<std::int16_t>();
      for (std::size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], m[i] / 2) << i;
      EXPECT_EQ(GF.stats().max_abs_m, 57);  // (2i − 100) / 2 = i − 50 for i < 108
    }
    plan.update(I, E, GF);
    for (double x : GF.to_doubles()) EXPECT_EQ(x, 0.0);
  }
}

// ---- refusals -------------------------------------------------------------------------------
template <typename E, typename F>
void expect_error(F&& call, const std::string& needle) {
  try {
    call();
    ADD_FAILURE() << "no exception; expected one mentioning '" << needle << "'";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message: " << e.what() << "\nexpected to contain: " << needle;
  }
}

TEST(Conv, RefusesBadGeometry) {
  // Plans are device-independent: checked on every run.
  const Shape in{3, 8, 8, 2}, flt{3, 3, 3, 4};
  expect_error<ShapeError>(
      [&] {
        ConvPlan p({4, 8, 8, 2}, flt);
      },
      "input has 4 channels but the filter has 3");
  expect_error<ShapeError>(
      [&] {
        ConvPlan p({3, 8, 2}, flt);
      },
      "the filter must have the input's rank 3");
  expect_error<ShapeError>([&] { ConvPlan p({3, 8}, {3, 4}); }, "rank 3, 4 or 5");
  expect_error<ShapeError>([&] { ConvPlan p({3, 2, 8, 2}, flt); }, "larger than the padded input");
  expect_error<ShapeError>([&] { ConvPlan p({3, 0, 8, 2}, flt); }, "at least 1");
  expect_error<ValueError>(
      [&] {
        ConvPlan p(in, flt, {{}, {0}, {}, {}});
      },
      "stride must be at least 1");
  expect_error<ValueError>(
      [&] {
        ConvPlan p(in, flt, {{}, {}, {1, 0}, {}});
      },
      "dilation must be at least 1");
  expect_error<ValueError>(
      [&] {
        ConvPlan p(in, flt, {{}, {}, {}, {-1}});
      },
      "upscale must be at least 1");
  expect_error<ValueError>([&] { ConvPlan p(in, flt, {{-1}, {}, {}, {}}); }, "padding must be ≥ 0");
  expect_error<ValueError>(
      [&] {
        ConvPlan p(in, flt, {{3}, {}, {}, {}});
      },
      "not smaller than the filter's extent 3");
  expect_error<ValueError>(
      [&] {
        ConvPlan p(in, flt, {{1, 1, 1}, {}, {}, {}});
      },
      "padding has 3 values");
  // Padding up to the dilated extent is fine.
  EXPECT_NO_THROW(ConvPlan(in, flt, {{4}, {}, {2}, {}}));
}

TEST(Conv, RefusesBadOperandsAndWritesNothing) {
  const Geo g = small_geo();
  const Device dev = test::device();
  Array I = flex_array(random_ints(g.input_size(), -9, 9, 24), 0, g.input_shape());
  Array F = flex_array(random_ints(g.filter_size(), -9, 9, 25), 0, g.filter_shape());
  Array E = flex_array(random_ints(g.output_size(), -9, 9, 26), 0, g.output_shape());
  const Ints old = random_ints(g.output_size(), -9, 9, 27);
  Array O = flex_array(old, 3, g.output_shape());
  const ConvParams p = g.params();
  // Output of the wrong size: the message gives the expected shape.
  Array O_bad = Array::zeros({4, 6, 6, 5}, DType::flex16, dev);
  expect_error<ShapeError>([&] { fprop(I, F, O_bad, p); }, "expected (K, P, Q, N) = (4, 6, 7, 5)");
  // Batch sizes that differ between grad_output and grad_input.
  Array E_bad = Array::zeros({4, 6, 7, 4}, DType::flex16, dev);
  Array dI = Array::zeros(g.input_shape(), DType::flex16, dev);
  expect_error<ShapeError>([&] { bprop(F, E_bad, dI, p); }, "grad_output has shape (4, 6, 7, 4)");
  // Filter channel count not matching the input.
  Array F_bad = Array::zeros({2, 3, 3, 4}, DType::flex16, dev);
  expect_error<ShapeError>([&] { fprop(I, F_bad, O, p); }, "channels");
  // A plan run with arrays of another geometry.
  ConvPlan plan(g.input_shape(), g.filter_shape(), p);
  expect_error<ShapeError>(
      [&] {
        plan.update(I, E, Array::zeros({3, 3, 3, 5}, DType::flex16, dev));
      },
      "grad_filter has shape (3, 3, 3, 5); expected (C, R, S, K) = (3, 3, 3, 4)");
  // Types.
  Array If = Array::zeros(g.input_shape(), DType::f32, dev);
  expect_error<DTypeError>([&] { fprop(If, F, O, p); },
                           "unsupported types input f32, filter flex16");
  Array Eu8 = Array::zeros(g.output_shape(), DType::u8, dev);
  expect_error<DTypeError>([&] { bprop(F, Eu8, dI, p); }, "unsupported types");
  Array Fu8 = Array::zeros(g.filter_shape(), DType::u8, dev);
  expect_error<DTypeError>([&] { fprop(I, Fu8, O, p); }, "unsupported types");
  Array Of = Array::zeros(g.output_shape(), DType::f32, dev);
  ConvOptions exact;
  exact.iwl_policy = IwlPolicy::exact;
  expect_error<DTypeError>([&] { fprop(I, F, Of, p, exact); }, "is not flex16");
  ConvOptions nan_beta;
  nan_beta.beta = std::nan("");
  expect_error<ValueError>([&] { fprop(I, F, O, p, nan_beta); }, "finite");
  ConvOptions bad_iwl;
  bad_iwl.iwl = 200;
  expect_error<ValueError>([&] { fprop(I, F, O, p, bad_iwl); }, "iwl");
  // Aliasing: an output overlapping an input, a broadcast output.
  Array shared = Array::zeros({g.input_size() + g.output_size()}, DType::flex16, dev);
  Array I_alias = shared.index("0:" + std::to_string(g.input_size())).reshape(g.input_shape());
  Array O_alias =
      shared.index("1:" + std::to_string(g.output_size() + 1)).reshape(g.output_shape());
  expect_error<ValueError>([&] { fprop(I_alias, F, O_alias, p); }, "overlaps an input");
  Array O_bcast = Array::zeros({1}, DType::flex16, dev).broadcast_to(g.output_shape());
  expect_error<ValueError>([&] { fprop(I, F, O_bcast, p); }, "broadcast");
  expect_error<ValueError>([&] { fprop(Array(), F, O, p); }, "empty Array handle");
  // Nothing was written by any failed call.
  EXPECT_EQ(ints_of(O), old);
  EXPECT_EQ(O.iwl(), 3);
}

// ---- CPU and CUDA -------------------------------------------------------------------------------
// flex16's (docs/flex16.md) promise: the same integer operands give the same mantissas, exponent
// and statistics on the CPU and on CUDA, for every direction in 1-3 dims and every way an output is
// finished: a fixed exponent one step too fine (rounding and saturation), the exact policy (its
// measuring pass), alpha / beta (the double path, reading the old output) and an f32 output.

// The operands and output of one run, made on `device` from the same host data.
struct DeviceCase {
  Array x, y, out;
};

Array make_flex(const Ints& v, int iwl, const Shape& shape, Device device) {
  std::vector<std::int16_t> m(v.begin(), v.end());
  return Array::from_flex16(m, iwl, shape, device);
}

// Counts the elements where the two results differ (bitwise for f32), reporting the first few.
int count_differences(const Array& cpu, const Array& gpu, const std::string& what) {
  int bad = 0;
  if (cpu.dtype() == DType::flex16) {
    const Ints a = ints_of(cpu), b = ints_of(gpu);
    for (std::size_t i = 0; i < a.size(); ++i)
      if (a[i] != b[i] && ++bad <= 3)
        ADD_FAILURE() << what << " element " << i << ": cpu " << a[i] << ", cuda " << b[i];
    EXPECT_EQ(cpu.iwl(), gpu.iwl()) << what;
    EXPECT_EQ(cpu.stats().max_abs_m, gpu.stats().max_abs_m) << what;
    EXPECT_EQ(cpu.stats().saturated, gpu.stats().saturated) << what;
    EXPECT_EQ(cpu.stats().nan_count, gpu.stats().nan_count) << what;
  } else {
    const auto a = cpu.to_vector<float>(), b = gpu.to_vector<float>();
    for (std::size_t i = 0; i < a.size(); ++i)
      if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0 && ++bad <= 3)
        ADD_FAILURE() << what << " element " << i << ": cpu " << a[i] << ", cuda " << b[i];
  }
  return bad;
}

// One environment variable set (or cleared, value nullptr) for a scope, then restored.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* before = std::getenv(name);
    had_ = before != nullptr;
    if (had_) before_ = before;
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (had_) {
      ::setenv(name_, before_.c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  bool had_ = false;
  std::string before_;
};

// The CUDA path's tuning variables: a value that is neither a choice nor a count is an error
// before anything is launched, named in the message, and the output keeps its values.
TEST(Conv, TuningVariablesAreChecked) {
  if (!test::device().is_cuda()) GTEST_SKIP() << "the variables steer the CUDA kernels";
  const ScopedEnv tensor_cores("FLEXKIT_CONV_KERNEL", nullptr);  // the path that reads them
  Geo g;
  g.C = 16, g.K = 16, g.N = 8;
  g.in = {1, 6, 6};
  g.flt = {1, 3, 3};
  g.pad = {0, 1, 1};
  const Ints in = random_ints(g.input_size(), -32768, 32767, 71);
  const Ints flt = random_ints(g.filter_size(), -32768, 32767, 72);
  const Ints grad = random_ints(g.output_size(), -32768, 32767, 73);
  const Array I = flex_array(in, 2, g.input_shape()), F = flex_array(flt, 1, g.filter_shape());
  const Array E = flex_array(grad, 3, g.output_shape());
  struct Variable {
    const char* name;
    const char* bad;
    Dir dir;
  };
  for (const Variable& v : {Variable{"FLEXKIT_CONV_STREAM_K", "many", Dir::update},
                            Variable{"FLEXKIT_CONV_STREAM_K", "-3", Dir::update},
                            Variable{"FLEXKIT_CONV_STREAM_K", "70000", Dir::update},
                            Variable{"FLEXKIT_CONV_KERNEL", "fastest", Dir::fprop},
                            Variable{"FLEXKIT_CONV_KERNEL", "Lean", Dir::update}}) {
    SCOPED_TRACE(std::string(v.name) + "=" + v.bad);
    const ScopedEnv bad(v.name, v.bad);
    const Shape shape = v.dir == Dir::fprop ? g.output_shape() : g.filter_shape();
    const Ints old = random_ints(shape_numel(shape), -32768, 32767, 74);
    Array out = flex_array(old, 4, shape);
    ConvOptions o;
    o.iwl = 4;
    if (v.dir == Dir::fprop) {
      expect_error<ValueError>([&] { fprop(I, F, out, g.params(), o); }, v.name);
    } else {
      expect_error<ValueError>([&] { update(I, E, out, g.params(), o); }, v.name);
    }
    EXPECT_EQ(ints_of(out), old);
  }
}

TEST(Conv, CpuAndCudaAreBitIdentical) {
  if (!test::device().is_cuda()) GTEST_SKIP() << "compares the CPU with the CUDA device";
  const Device cpu = Device::cpu(), gpu = test::device();
  std::vector<Geo> geos;
  {  // 1-d, long enough that the CUDA update sums several slices (700 · 16 > 4096 terms).
    Geo g;
    g.dims = 1;
    g.C = 5, g.K = 7, g.N = 16;
    g.in = {1, 1, 700};
    g.flt = {1, 1, 5};
    g.pad = {0, 0, 2};
    geos.push_back(g);
  }
  {  // 2-d with a stride.
    Geo g;
    g.dims = 2;
    g.C = 6, g.K = 9, g.N = 4;
    g.in = {1, 19, 17};
    g.flt = {1, 3, 3};
    g.pad = {0, 1, 1};
    g.str = {1, 2, 1};
    geos.push_back(g);
  }
  {  // 2-d with dilation and upscale.
    Geo g;
    g.dims = 2;
    g.C = 4, g.K = 5, g.N = 3;
    g.in = {1, 9, 8};
    g.flt = {1, 3, 2};
    g.pad = {0, 2, 1};
    g.str = {1, 1, 2};
    g.dil = {1, 2, 1};
    g.up = {1, 1, 2};
    geos.push_back(g);
  }
  {  // 3-d, every parameter in some dim.
    Geo g;
    g.dims = 3;
    g.C = 3, g.K = 4, g.N = 2;
    g.in = {6, 7, 8};
    g.flt = {3, 2, 3};
    g.pad = {1, 0, 1};
    g.str = {1, 2, 1};
    g.dil = {2, 1, 1};
    g.up = {1, 1, 2};
    geos.push_back(g);
  }
  enum class Finish { exact, fixed_fine, alpha_beta, f32_out };
  int bad = 0;
  unsigned seed = 100;
  for (const Geo& g : geos)
    for (bool spikes : {false, true})
      for (Dir dir : {Dir::fprop, Dir::bprop, Dir::update}) {
        if (dir == Dir::bprop && spikes) continue;
        seed += 10;
        const Shape si = g.input_shape(), sf = g.filter_shape(), so = g.output_shape();
        const Shape shape = dir == Dir::fprop ? so : dir == Dir::bprop ? si : sf;
        const Ints in = spikes ? random_ints(g.input_size(), 0, 255, seed)
                               : random_ints(g.input_size(), -32768, 32767, seed);
        const Ints flt = random_ints(g.filter_size(), -32768, 32767, seed + 1);
        const Ints grad = random_ints(g.output_size(), -32768, 32767, seed + 2);
        const Ints old = random_ints(shape_numel(shape), -32768, 32767, seed + 3);
        const auto old_f = random_reals(shape_numel(shape), seed + 4);
        auto make = [&](Device d, Finish f) {
          Array I = spikes
                        ? Array::from_vector(std::vector<std::uint8_t>(in.begin(), in.end()), si, d)
                        : make_flex(in, 3, si, d);
          Array F = make_flex(flt, -2, sf, d), E = make_flex(grad, 5, so, d);
          Array out =
              f == Finish::f32_out
                  ? Array::from_vector(std::vector<float>(old_f.begin(), old_f.end()), shape, d)
                  : make_flex(old, 9, shape, d);
          if (dir == Dir::fprop) return DeviceCase{I, F, out};
          if (dir == Dir::bprop) return DeviceCase{F, E, out};
          return DeviceCase{I, E, out};
        };
        auto run = [&](const DeviceCase& c, const ConvOptions& o) {
          if (dir == Dir::fprop) fprop(c.x, c.y, c.out, g.params(), o);
          if (dir == Dir::bprop) bprop(c.x, c.y, c.out, g.params(), o);
          if (dir == Dir::update) update(c.x, c.y, c.out, g.params(), o);
        };
        int exact_iwl = 0;
        for (Finish f : {Finish::exact, Finish::fixed_fine, Finish::alpha_beta, Finish::f32_out}) {
          ConvOptions o;
          if (f == Finish::exact) o.iwl_policy = IwlPolicy::exact;
          if (f == Finish::fixed_fine) o.iwl = exact_iwl - 1;
          if (f == Finish::alpha_beta) o.iwl = exact_iwl, o.alpha = -0.75, o.beta = 0.5;
          if (f == Finish::f32_out) o.alpha = 1.5, o.beta = 1.0;
          const DeviceCase on_cpu = make(cpu, f), on_gpu = make(gpu, f);
          run(on_cpu, o);
          run(on_gpu, o);
          if (f == Finish::exact) exact_iwl = on_cpu.out.iwl();
          const std::string what = g.str_() + (spikes ? " u8" : " flex16") + " dir " +
                                   std::to_string(static_cast<int>(dir)) + " finish " +
                                   std::to_string(static_cast<int>(f));
          bad += count_differences(on_cpu.out, on_gpu.out, what);
          if (bad > 20) FAIL() << "stopping after " << bad << " differences";
        }
      }
  EXPECT_EQ(bad, 0);
}

}  // namespace
}  // namespace flexkit
