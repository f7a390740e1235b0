// Assignments described once (ir/assign_signature.hpp, backend/expr_backend.hpp): an assignment's
// signature is equal exactly when the structure is (ops, dtypes, layouts, alignment, which leaves
// are the same view, which scalars the same value), and on CUDA an assignment that reuses the
// description of an earlier one stores the same bits as the full planning path, with its own
// data, exponents, scalars and seed; each result is also checked against float64 on the host.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "flexkit/cuda.hpp"
#include "flexkit/flexkit.hpp"
#include "ir/assign_signature.hpp"
#include "support/random_arrays.hpp"
#include "support/test_device.hpp"

namespace flexkit {
namespace {

using test::device;

// ---- signatures (host only) ---------------------------------------------------------------------

std::vector<std::int64_t> words_of(const Array& out, const Expr& e,
                                   const AssignOptions& options = {}) {
  ir::AssignSignature s;
  EXPECT_TRUE(ir::sign_assignment(out, e.node(), options, s));
  return s.words;
}

bool signs(const Array& out, const Expr& e, const AssignOptions& options = {}) {
  ir::AssignSignature s;
  return ir::sign_assignment(out, e.node(), options, s);
}

Array host(const Shape& shape, unsigned seed) {
  return Array::from_floats(
      test::uniform_values(static_cast<std::size_t>(shape_numel(shape)), seed, -1.0f, 1.0f), shape,
      DType::f32, Device::cpu());
}

TEST(AssignSignature, EqualForTheSameStructureOverOtherData) {
  const Array a = host({8, 12}, 1), b = host({8, 12}, 2), c = host({12}, 3);
  const Array x = host({8, 12}, 4), y = host({8, 12}, 5), z = host({12}, 6);
  Array out = Array::empty({8, 12}, DType::f32), other = Array::empty({8, 12}, DType::f32);
  EXPECT_EQ(words_of(out, sig(a * b + c) * 2.0 - 0.5), words_of(other, sig(x * y + z) * 7.0 - 3.0));
}

TEST(AssignSignature, DiffersWhereThePlanWould) {
  const Array a = host({8, 12}, 1), b = host({8, 12}, 2), c = host({8, 12}, 3);
  Array out = Array::empty({8, 12}, DType::f32);
  const auto base = words_of(out, a * b + 2.0 * c);
  EXPECT_NE(base, words_of(out, a * b - 2.0 * c)) << "another op";
  EXPECT_NE(base, words_of(out, a * a + 2.0 * c)) << "a leaf read twice is one operand";
  EXPECT_NE(words_of(out, a * 2.0 + 2.0), words_of(out, a * 2.0 + 3.0)) << "equal scalars share";
  const Array bf = evaluate(Expr(b), DType::bf16);
  EXPECT_NE(base, words_of(out, a * bf + 2.0 * c)) << "another operand dtype";
  const Array wide = host({12, 8}, 7);
  EXPECT_NE(base, words_of(out, a * wide.T() + 2.0 * c)) << "another layout";
  const Array padded = host({8, 13}, 8);
  EXPECT_NE(base, words_of(out, a * b + 2.0 * padded.index("..., 1:"))) << "another stride";
  // The same shape and strides 4 bytes off a 16-byte boundary: vector access no longer fits.
  const Array flat = host({97}, 9);
  const Array on = flat.index(":96").reshape({8, 12}), off = flat.index("1:").reshape({8, 12});
  EXPECT_EQ(base, words_of(out, a * b + 2.0 * on));
  EXPECT_NE(base, words_of(out, a * b + 2.0 * off)) << "another alignment";
  Array out_bf = Array::empty({8, 12}, DType::bf16);
  EXPECT_NE(base, words_of(out_bf, a * b + 2.0 * c)) << "another output dtype";
  Array out_t = Array::empty({12, 8}, DType::f32).T();
  EXPECT_NE(base, words_of(out_t, a * b + 2.0 * c)) << "another output layout";
}

TEST(AssignSignature, ReductionsByOpAndAxis) {
  const Array a = host({8, 12}, 1), x = host({8, 12}, 2);
  Array out = Array::empty({8, 12}, DType::f32);
  const auto base = words_of(out, a - max(a, 1));
  EXPECT_EQ(base, words_of(out, x - max(x, 1)));
  EXPECT_NE(base, words_of(out, a - min(a, 1))) << "another reduction";
  EXPECT_NE(base, words_of(out, a - max(a, 0))) << "another axis";
  EXPECT_NE(base, words_of(out, a - max(x, 1))) << "another leaf reduced";
  EXPECT_NE(base, words_of(out, Expr(out) - max(out, 1))) << "out read in place";
}

TEST(AssignSignature, LeavesWhatItDoesNotCoverToThePlanner) {
  const Array a = host({8, 12}, 1), b = host({8, 12}, 2);
  Array out = Array::empty({8, 12}, DType::f32);
  EXPECT_FALSE(signs(out, Expr(out.T().T()) + out.index("::-1, :"))) << "another view of out";
  EXPECT_TRUE(signs(out, Expr(out) * 2.0 + b)) << "out's own view is read in place";
  Array flex = Array::zeros({8, 12}, DType::flex16);
  EXPECT_FALSE(signs(flex, Expr(flex) + a)) << "a flex16 output read by its own write";
  EXPECT_FALSE(signs(flex, a + b, {.iwl_policy = IwlPolicy::exact}));
  EXPECT_TRUE(signs(flex, a + b, {.iwl_policy = IwlPolicy::fixed}));
  Array empty = Array::empty({0, 12}, DType::f32);
  EXPECT_FALSE(signs(empty, Expr(host({0, 12}, 3)) * 2.0));
}

// ---- reuse against the full path (the test's device) ----------------------------------------

std::uint64_t reuses() {
  return cuda::kernel_cache_stats().assignment_reuses;
}

std::vector<std::uint8_t> bits(const Array& a) {
  const Array h = a.copy_to(Device::cpu());
  std::vector<std::uint8_t> out(static_cast<std::size_t>(h.size()) * itemsize(h.dtype()));
  if (!out.empty()) std::memcpy(out.data(), h.data(), out.size());
  return out;
}

// One case: `write(k, out)` assigns the k-th data set into out. Data set 0 warms the cache; data
// set 1 must reuse its description (CUDA) and store exactly what the full path stores after the
// kept descriptions are dropped; `check` compares data set k's result with float64.
void expect_reuse_matches_full_path(const Shape& out_shape, DType out_dtype,
                                    const std::function<void(int, Array&)>& write,
                                    const std::function<void(int, const Array&)>& check,
                                    const std::string& what) {
  SCOPED_TRACE(what);
  Array out = Array::zeros(out_shape, out_dtype, device());
  write(0, out);
  check(0, out);
  const Array start = out.clone();  // what data set 1 starts from (in-place writes read it)
  const std::uint64_t before = reuses();
  write(1, out);
  if (device().is_cuda()) {
    EXPECT_EQ(reuses(), before + 1) << "the kept description was not used";
  }
  check(1, out);
  const std::vector<std::uint8_t> reused = bits(out);
  const int reused_iwl = out_dtype == DType::flex16 ? out.iwl() : 0;

  cuda::clear_kernel_memory_cache();  // drops every kept description
  Array full = start.clone();
  const std::uint64_t dropped = reuses();
  write(1, full);
  EXPECT_EQ(reuses(), dropped) << "the full path reused a dropped description";
  EXPECT_EQ(bits(full), reused);
  if (out_dtype == DType::flex16) {
    EXPECT_EQ(full.iwl(), reused_iwl);
  }
}

void expect_near_all(const Array& got, const std::vector<double>& want, double tolerance) {
  const std::vector<double> g = got.to_doubles();
  ASSERT_EQ(g.size(), want.size());
  for (std::size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], want[i], tolerance * (1 + std::abs(want[i]))) << "element " << i;
}

TEST(AssignReuse, FiveOperandsNewDataEachCall) {
  constexpr std::int64_t kRows = 37, kCols = 129;
  std::vector<std::vector<Array>> sets;
  for (unsigned k = 0; k < 2; ++k) {
    std::vector<Array> s;
    for (unsigned i = 0; i < 5; ++i)
      s.push_back(test::uniform_array({kRows, kCols}, 10 * k + i + 1, -2.0f, 2.0f));
    sets.push_back(s);
  }
  expect_reuse_matches_full_path(
      {kRows, kCols}, DType::f32,
      [&](int k, Array& out) {
        const auto& s = sets[k];
        assign(out, sig(s[0] * s[1] + s[2]) * s[3] - s[4]);
      },
      [&](int k, const Array& out) {
        std::vector<std::vector<double>> v;
        for (const Array& a : sets[k]) v.push_back(a.to_doubles());
        std::vector<double> want(v[0].size());
        for (std::size_t i = 0; i < want.size(); ++i)
          want[i] = 1 / (1 + std::exp(-(v[0][i] * v[1][i] + v[2][i]))) * v[3][i] - v[4][i];
        expect_near_all(out, want, 1e-5);
      },
      "sig(a*b+c)*d-e");
}

TEST(AssignReuse, BroadcastStridedAndScalarsOfTheCall) {
  constexpr std::int64_t kRows = 24, kCols = 40;
  const double scale[2] = {2.0, -0.75}, shift[2] = {3.0, 0.125};
  std::vector<Array> a, row, col;
  for (unsigned k = 0; k < 2; ++k) {
    a.push_back(test::uniform_array({kCols, kRows}, 30 + k, -1.0f, 1.0f));  // read transposed
    row.push_back(test::uniform_array({kCols}, 40 + k, -1.0f, 1.0f));
    col.push_back(test::uniform_array({kRows, 1}, 50 + k, -1.0f, 1.0f));
  }
  expect_reuse_matches_full_path(
      {kRows, kCols}, DType::f32,
      [&](int k, Array& out) { assign(out, a[k].T() * scale[k] + row[k] * col[k] + shift[k]); },
      [&](int k, const Array& out) {
        const auto av = a[k].to_doubles(), rv = row[k].to_doubles(), cv = col[k].to_doubles();
        std::vector<double> want(kRows * kCols);
        for (std::int64_t r = 0; r < kRows; ++r)
          for (std::int64_t c = 0; c < kCols; ++c)
            want[r * kCols + c] = av[c * kRows + r] * scale[k] + rv[c] * cv[r] + shift[k];
        expect_near_all(out, want, 1e-6);
      },
      "a.T()*s + row*col + t");
}

TEST(AssignReuse, InPlaceUpdateOfItsOwnView) {
  constexpr std::int64_t kN = 1000;
  std::vector<Array> g;
  for (unsigned k = 0; k < 2; ++k) g.push_back(test::uniform_array({kN}, 60 + k, -1.0f, 1.0f));
  std::vector<double> state(kN, 0.0);  // out starts at zero; data set 1 follows data set 0
  expect_reuse_matches_full_path(
      {kN}, DType::f32, [&](int k, Array& out) { assign(out, Expr(out) * 0.5 + g[k]); },
      [&](int k, const Array& out) {
        const auto gv = g[k].to_doubles();
        for (std::int64_t i = 0; i < kN; ++i) state[i] = state[i] * 0.5 + gv[i];
        expect_near_all(out, state, 1e-6);
      },
      "out = out*0.5 + g");
}

TEST(AssignReuse, NarrowOperandsAndStochasticFlex16Writes) {
  constexpr std::int64_t kN = 4099;  // not a multiple of any vector width
  std::vector<Array> w, s, b;
  const double lr[2] = {0.01, 0.003};
  for (unsigned k = 0; k < 2; ++k) {
    // Operand exponents differ between the data sets (magnitudes 4 and 0.25).
    const float m = k == 0 ? 4.0f : 0.25f;
    w.push_back(
        Array::from_floats(test::uniform_values(kN, 70 + k, -m, m), {kN}, DType::flex16, device()));
    s.push_back(Array::from_floats(test::uniform_values(kN, 80 + k, 0.0f, 2.0f), {kN}, DType::bf16,
                                   device()));
    b.push_back(evaluate(Expr(test::uniform_array({kN}, 90 + k, 0.0f, 1.0f)) > 0.5, DType::u8));
  }
  const int out_iwl[2] = {3, 0};
  const std::uint64_t seed[2] = {11, 12};
  expect_reuse_matches_full_path(
      {kN}, DType::flex16,
      [&](int k, Array& out) {
        assign(out, w[k] - lr[k] * s[k] * b[k],
               {.iwl_policy = IwlPolicy::fixed,
                .iwl = out_iwl[k],
                .rounding = Rounding::stochastic,
                .seed = seed[k]});
      },
      [&](int k, const Array& out) {
        EXPECT_EQ(out.iwl(), out_iwl[k]);
        const auto wv = w[k].to_doubles(), sv = s[k].to_doubles(), bv = b[k].to_doubles();
        const double step = std::ldexp(1.0, out_iwl[k] - 15);
        const auto got = out.to_doubles();
        for (std::int64_t i = 0; i < kN; ++i) {
          const double want = wv[i] - lr[k] * sv[i] * bv[i];
          ASSERT_LE(std::abs(got[i] - want), step * (1 + 1e-3)) << "element " << i;  // one step
        }
      },
      "flex16 w - lr*bf16*u8, stochastic");
}

// Softmax over rows of 300 (one fused kernel on CUDA, its temporaries new each call), with
// another scale each call.
TEST(AssignReuse, FusedSoftmaxNewDataAndScalarEachCall) {
  constexpr std::int64_t kRows = 37, kCols = 300;
  const double scale[2] = {1.0, 0.5};
  std::vector<Array> x;
  for (unsigned k = 0; k < 2; ++k)
    x.push_back(test::uniform_array({kRows, kCols}, 100 + k, -4.0f, 4.0f));
  expect_reuse_matches_full_path(
      {kRows, kCols}, DType::f32,
      [&](int k, Array& out) {
        const Expr z = (x[k] - max(x[k], 1)) * scale[k];
        assign(out, exp(z) / sum(exp(z), 1));
      },
      [&](int k, const Array& out) {
        const auto v = x[k].to_doubles();
        std::vector<double> want(v.size());
        for (std::int64_t r = 0; r < kRows; ++r) {
          double m = v[r * kCols], total = 0;
          for (std::int64_t c = 1; c < kCols; ++c) m = std::max(m, v[r * kCols + c]);
          for (std::int64_t c = 0; c < kCols; ++c)
            total += want[r * kCols + c] = std::exp((v[r * kCols + c] - m) * scale[k]);
          for (std::int64_t c = 0; c < kCols; ++c) want[r * kCols + c] /= total;
        }
        expect_near_all(out, want, 1e-5);
      },
      "softmax over rows");
}

// A column mean subtracted (the reduced axis not the last): a lane a column (a width that is not
// a multiple of 4), and 4 neighbouring columns a thread held as strips. Both shapes have columns
// enough to fill any device, so both fuse on CUDA.
TEST(AssignReuse, FusedColumnMeanSubtracted) {
  for (const Shape& shape : {Shape{300, 8194}, Shape{1024, 8192}}) {
    const std::int64_t rows = shape[0], cols = shape[1];
    SCOPED_TRACE(testing::Message() << rows << " x " << cols);
    std::vector<Array> x;
    for (unsigned k = 0; k < 2; ++k) x.push_back(test::uniform_array(shape, 110 + k, -2.0f, 2.0f));
    Array out = Array::zeros(shape, DType::f32, device());
    for (int k = 0; k < 2; ++k) {
      const std::uint64_t before = reuses();
      assign(out, x[k] - mean(x[k], 0));
      if (device().is_cuda() && k == 1) {
        EXPECT_EQ(reuses(), before + 1) << "the kept description was not used";
      }
      const auto v = x[k].to_doubles();
      std::vector<double> want(v.size());
      for (std::int64_t c = 0; c < cols; ++c) {
        double total = 0;
        for (std::int64_t r = 0; r < rows; ++r) total += v[r * cols + c];
        for (std::int64_t r = 0; r < rows; ++r) want[r * cols + c] = v[r * cols + c] - total / rows;
      }
      expect_near_all(out, want, 1e-5);
    }
  }
}

TEST(AssignReuse, FusedRowMaxSubtractedInPlace) {
  constexpr std::int64_t kRows = 20, kCols = 513;
  const Array start = test::uniform_array({kRows, kCols}, 120, -3.0f, 3.0f);
  std::vector<double> state = start.to_doubles();
  expect_reuse_matches_full_path(
      {kRows, kCols}, DType::f32,
      [&](int k, Array& out) {
        if (k == 0) out.assign(start);
        assign(out, (Expr(out) - max(out, 1)) * 2.0 + 1.0);
      },
      [&](int, const Array& out) {
        for (std::int64_t r = 0; r < kRows; ++r) {
          double m = state[r * kCols];
          for (std::int64_t c = 1; c < kCols; ++c) m = std::max(m, state[r * kCols + c]);
          for (std::int64_t c = 0; c < kCols; ++c)
            state[r * kCols + c] = (state[r * kCols + c] - m) * 2.0 + 1.0;
        }
        expect_near_all(out, state, 1e-6);
      },
      "out = (out - max(out, 1)) * 2 + 1");
}

TEST(AssignReuse, FusedIntoFlex16AtTheCallsExponent) {
  constexpr std::int64_t kRows = 16, kCols = 1000;
  std::vector<Array> x;
  for (unsigned k = 0; k < 2; ++k)
    x.push_back(test::uniform_array({kRows, kCols}, 130 + k, -1.0f, 1.0f));
  const int out_iwl[2] = {1, 2};
  expect_reuse_matches_full_path(
      {kRows, kCols}, DType::flex16,
      [&](int k, Array& out) {
        assign(out, exp(x[k] - max(x[k], 1)), {.iwl_policy = IwlPolicy::fixed, .iwl = out_iwl[k]});
      },
      [&](int k, const Array& out) {
        EXPECT_EQ(out.iwl(), out_iwl[k]);
        const auto v = x[k].to_doubles();
        const auto got = out.to_doubles();
        const double step = std::ldexp(1.0, out_iwl[k] - 15);
        for (std::int64_t r = 0; r < kRows; ++r) {
          double m = v[r * kCols];
          for (std::int64_t c = 1; c < kCols; ++c) m = std::max(m, v[r * kCols + c]);
          for (std::int64_t c = 0; c < kCols; ++c) {
            const double want = std::exp(v[r * kCols + c] - m);
            ASSERT_LE(std::abs(got[r * kCols + c] - want), step * 0.5 + 1e-6 * want)
                << "element " << r * kCols + c;
          }
        }
      },
      "flex16 exp(x - max(x, 1))");
}

}  // namespace
}  // namespace flexkit
