// Differential tests of fused expressions (include/flexkit/expr.hpp), table-driven: every case
// builds a tree over seeded random inputs on the --device, assigns it, and compares each output
// element with the float64 reference of expr_reference.hpp under the case's stated tolerance. The
// formula of a case is written once, as a generic lambda, and instantiated for flexkit::Expr and
// for the reference tensor, so the library tree and the reference cannot drift apart.
//
// Tolerances are stated against the reference's error scale (for one op, |value|; for a chain,
// the first-order sum of the roundings it contains; for a sum over n values, (n-1)·Σ|x|). Where
// the scale is 0 every step was exact in float32 and the output must match bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "expr_reference.hpp"
#include "flexkit/flexkit.hpp"
#include "support/test_device.hpp"

namespace flexkit {
namespace {

using exprref::CheckReport;
using exprref::Form;
using exprref::Tensor;
using exprref::Tolerance;
using test::device;

// ---- stated tolerances (rtol on the error scale, atol absolute) -------------------------------
// Arithmetic: one correctly rounded op has error <= 2^-24 of its scale; 2e-6 (~33 ulps) leaves
// room for fused multiply-add contraction and approximate division on the device.
constexpr Tolerance kArith{2e-6, 0.0};
// exp, log, sqrt, sig, tanh, ...: a few ulps for libm, more for fast device intrinsics; the
// absolute part covers log near 1 and tanh near 0, where relative error is not meaningful.
constexpr Tolerance kTrans{1e-5, 1e-6};
// pow = exp2(b·log2(a)): the error of log2(a) is amplified by |b·ln a|.
constexpr Tolerance kPow{2e-5, 1e-6};
// Reductions: the scale already holds (n-1)·Σ|x| (any summation order); 1e-6 is ~17 ulps of it.
constexpr Tolerance kReduce{1e-6, 0.0};

// ---- seeded inputs ----------------------------------------------------------------------------

// splitmix64: the same stream on every platform (std:: distributions are not).
struct Rng {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double unit() { return static_cast<double>(next() >> 11) * 0x1p-53; }
};

std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// How input values are drawn. `grid` values have few mantissa bits, so sums and products of them
// are exact in float32 (and in bf16 / flex16 storage), which is what bit-exact checks need.
struct Gen {
  enum class Kind { uniform, log_uniform, grid, away } kind = Kind::uniform;
  double lo = -2, hi = 2, step = 0;
};
Gen uniform(double lo, double hi) {
  return {Gen::Kind::uniform, lo, hi};
}
Gen log_uniform(double lo, double hi) {  // positive, every magnitude equally likely
  return {Gen::Kind::log_uniform, lo, hi};
}
Gen grid(double lo, double hi, double step) {
  return {Gen::Kind::grid, lo, hi, step};
}
Gen ints(double lo, double hi) {
  return grid(lo, hi, 1);
}
Gen away(double lo, double hi) {  // random sign, |x| in [lo, hi]: safe divisors
  return {Gen::Kind::away, lo, hi};
}

std::vector<float> generate(const Gen& g, std::int64_t n, Rng& rng) {
  std::vector<float> out(static_cast<std::size_t>(n));
  for (float& x : out) {
    const double u = rng.unit();
    double v = 0;
    switch (g.kind) {
      case Gen::Kind::uniform:
        v = g.lo + (g.hi - g.lo) * u;
        break;
      case Gen::Kind::log_uniform:
        v = std::exp(std::log(g.lo) + (std::log(g.hi) - std::log(g.lo)) * u);
        break;
      case Gen::Kind::grid: {
        const double steps = std::floor((g.hi - g.lo) / g.step + 1e-9);
        v = g.lo + std::min(std::floor(u * (steps + 1)), steps) * g.step;
        break;
      }
      case Gen::Kind::away:
        v = (rng.next() & 1 ? 1 : -1) * (g.lo + (g.hi - g.lo) * u);
        break;
    }
    x = static_cast<float>(v);
  }
  return out;
}

using ViewFn = std::function<Array(const Array&)>;

ViewFn idx(std::string text) {
  return [text](const Array& a) { return a.index(text); };
}
ViewFn tr() {
  return [](const Array& a) { return a.T(); };
}
ViewFn perm(std::vector<int> p) {
  return [p](const Array& a) { return a.transpose(std::span<const int>(p)); };
}
ViewFn bcast(Shape shape) {
  return [shape](const Array& a) { return a.broadcast_to(shape); };
}

// One operand: a base array of `shape` and `dtype` filled from `gen`, read through `view`.
struct In {
  Shape shape;
  Gen gen = uniform(-2, 2);
  DType dtype = DType::f32;
  ViewFn view;
};
In in(Shape shape, Gen gen = uniform(-2, 2), DType dtype = DType::f32, ViewFn view = {}) {
  return In{std::move(shape), gen, dtype, std::move(view)};
}
In in(Shape shape, Gen gen, ViewFn view) {
  return In{std::move(shape), gen, DType::f32, std::move(view)};
}

// Where the result goes: a base array (seeded contents, of `shape` or the tree's shape), the view
// of it selected by `index` and then `view`, its dtype and flex16 exponent, and the form used.
struct Out {
  std::optional<Shape> shape;
  std::string index;
  ViewFn view;
  DType dtype = DType::f32;
  int iwl = 0;
  AssignOptions options;
  Form form = Form::assign_fn;
};

struct Case {
  std::string name;
  std::vector<In> inputs;
  Tolerance tol;
  std::function<Expr(const std::vector<Expr>&)> expr;
  std::function<Tensor(const std::vector<Tensor>&)> ref;
  Out out;
};

// gtest prints parameters on failure; the name is what identifies a case.
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

// `formula` is a generic lambda over the leaves (a vector of Expr or of Tensor).
template <class F>
Case make(std::string name, std::vector<In> inputs, Tolerance tol, F formula, Out out = {}) {
  Case c{std::move(name), std::move(inputs), tol, {}, {}, std::move(out)};
  c.expr = [formula](const std::vector<Expr>& x) { return Expr(formula(x)); };
  c.ref = [formula](const std::vector<Tensor>& x) { return Tensor(formula(x)); };
  return c;
}

Out to(DType dtype, int iwl = 0) {
  Out o;
  o.dtype = dtype;
  o.iwl = iwl;
  return o;
}
Out exact_flex16() {
  Out o = to(DType::flex16);
  o.options.iwl_policy = IwlPolicy::exact;
  return o;
}
Out into_shape(Shape shape) {
  Out o;
  o.shape = std::move(shape);
  return o;
}
Out into_index(std::optional<Shape> shape, std::string index, DType dtype = DType::f32,
               int iwl = 0) {
  Out o = to(dtype, iwl);
  o.shape = std::move(shape);
  o.index = std::move(index);
  return o;
}
Out into_view(Shape shape, ViewFn view) {
  Out o;
  o.shape = std::move(shape);
  o.view = std::move(view);
  return o;
}
Out with_form(Form form, Out o = {}) {
  o.form = form;
  return o;
}

// Reductions by number, so one generic formula covers all six.
enum Reduction { kSum, kMax, kMin, kMean, kArgmax, kArgmin };
const char* reduction_name(int r) {
  static const char* names[] = {"sum", "max", "min", "mean", "argmax", "argmin"};
  return names[r];
}
template <class T>
T reduce_by(int r, const T& a, std::optional<int> axis) {
  switch (r) {
    case kSum:
      return axis ? sum(a, *axis) : sum(a);
    case kMax:
      return axis ? max(a, *axis) : max(a);
    case kMin:
      return axis ? min(a, *axis) : min(a);
    case kMean:
      return axis ? mean(a, *axis) : mean(a);
    case kArgmax:
      return axis ? argmax(a, *axis) : argmax(a);
    default:
      return axis ? argmin(a, *axis) : argmin(a);
  }
}

// ---- the table --------------------------------------------------------------------------------

std::vector<Case> elementwise_cases() {
  const Shape s = {6, 7};
  const Gen g8 = grid(-8, 8, 0.125);  // 7 significant bits: products and sums stay exact
  std::vector<Case> c;
  // Arithmetic.
  c.push_back(make("add", {in(s, uniform(-4, 4)), in(s, uniform(-4, 4))}, kArith,
                   [](const auto& x) { return x[0] + x[1]; }));
  c.push_back(
      make("add_exact", {in(s, g8), in(s, g8)}, kArith, [](const auto& x) { return x[0] + x[1]; }));
  c.push_back(make("sub", {in(s, uniform(-4, 4)), in(s, uniform(-4, 4))}, kArith,
                   [](const auto& x) { return x[0] - x[1]; }));
  c.push_back(
      make("sub_exact", {in(s, g8), in(s, g8)}, kArith, [](const auto& x) { return x[0] - x[1]; }));
  c.push_back(make("mul", {in(s, uniform(-4, 4)), in(s, uniform(-4, 4))}, kArith,
                   [](const auto& x) { return x[0] * x[1]; }));
  c.push_back(
      make("mul_exact", {in(s, g8), in(s, g8)}, kArith, [](const auto& x) { return x[0] * x[1]; }));
  c.push_back(make("div", {in(s, uniform(-4, 4)), in(s, away(0.5, 4))}, kArith,
                   [](const auto& x) { return x[0] / x[1]; }));
  c.push_back(
      make("div_by_pow2_exact", {in(s, g8)}, kArith, [](const auto& x) { return x[0] / 4; }));
  c.push_back(make("neg_operator", {in(s)}, kArith, [](const auto& x) { return -x[0]; }));
  c.push_back(make("neg", {in(s)}, kArith, [](const auto& x) { return neg(x[0]); }));
  c.push_back(make("pow", {in(s, uniform(0.25, 4)), in(s, uniform(-2, 2))}, kPow,
                   [](const auto& x) { return pow(x[0], x[1]); }));
  c.push_back(make("pow_scalar_exponent", {in(s, uniform(0.25, 4))}, kPow,
                   [](const auto& x) { return pow(x[0], 3) + pow(x[0], 0.5); }));
  c.push_back(make("pow_scalar_base", {in(s, uniform(-3, 3))}, kPow,
                   [](const auto& x) { return pow(2.5, x[0]); }));
  c.push_back(make("polynomial", {in(s, uniform(-3, 3))}, kArith,
                   [](const auto& x) { return x[0] * x[0] * x[0] - 2 * x[0] + 1; }));
  // Comparisons on a small integer grid, so equal pairs are common.
  const Gen small = ints(-2, 2);
  c.push_back(make("eq", {in(s, small), in(s, small)}, kArith,
                   [](const auto& x) { return eq(x[0], x[1]); }));
  c.push_back(make("ne", {in(s, small), in(s, small)}, kArith,
                   [](const auto& x) { return ne(x[0], x[1]); }));
  c.push_back(make("lt", {in(s, small), in(s, small)}, kArith,
                   [](const auto& x) { return lt(x[0], x[1]); }));
  c.push_back(make("le", {in(s, small), in(s, small)}, kArith,
                   [](const auto& x) { return le(x[0], x[1]); }));
  c.push_back(make("gt", {in(s, small), in(s, small)}, kArith,
                   [](const auto& x) { return gt(x[0], x[1]); }));
  c.push_back(make("ge", {in(s, small), in(s, small)}, kArith,
                   [](const auto& x) { return ge(x[0], x[1]); }));
  c.push_back(make("comparison_operators", {in(s, small), in(s, small)}, kArith, [](const auto& x) {
    return (x[0] < x[1]) + 2 * (x[0] <= x[1]) + 4 * (x[0] > x[1]) + 8 * (x[0] >= x[1]);
  }));
  c.push_back(make("compare_with_scalar", {in(s, uniform(-1, 1)), in(s, small)}, kArith,
                   [](const auto& x) { return gt(x[0], 0.5) + eq(x[1], 1); }));
  // Unary functions, each over its sensible domain.
  c.push_back(
      make("abs", {in(s, uniform(-4, 4))}, kArith, [](const auto& x) { return abs(x[0]); }));
  c.push_back(
      make("sqr", {in(s, uniform(-4, 4))}, kArith, [](const auto& x) { return sqr(x[0]); }));
  c.push_back(make("sqr_exact", {in(s, g8)}, kArith, [](const auto& x) { return sqr(x[0]); }));
  c.push_back(make("sqrt", {in(s, log_uniform(1e-3, 1e3))}, kTrans,
                   [](const auto& x) { return sqrt(x[0]); }));
  c.push_back(
      make("exp", {in(s, uniform(-10, 10))}, kTrans, [](const auto& x) { return exp(x[0]); }));
  c.push_back(
      make("exp2", {in(s, uniform(-20, 20))}, kTrans, [](const auto& x) { return exp2(x[0]); }));
  c.push_back(make("log", {in(s, log_uniform(1e-3, 1e3))}, kTrans,
                   [](const auto& x) { return log(x[0]); }));
  c.push_back(make("log2", {in(s, log_uniform(1e-3, 1e3))}, kTrans,
                   [](const auto& x) { return log2(x[0]); }));
  c.push_back(make("log_near_one", {in(s, uniform(0.9, 1.1))}, kTrans,
                   [](const auto& x) { return log(x[0]) + log2(x[0]); }));
  c.push_back(
      make("sig", {in(s, uniform(-20, 20))}, kTrans, [](const auto& x) { return sig(x[0]); }));
  c.push_back(
      make("sig2", {in(s, uniform(-30, 30))}, kTrans, [](const auto& x) { return sig2(x[0]); }));
  c.push_back(
      make("tanh", {in(s, uniform(-10, 10))}, kTrans, [](const auto& x) { return tanh(x[0]); }));
  c.push_back(
      make("tanh2", {in(s, uniform(-15, 15))}, kTrans, [](const auto& x) { return tanh2(x[0]); }));
  c.push_back(make("tanh_near_zero", {in(s, uniform(-1e-3, 1e-3))}, kTrans,
                   [](const auto& x) { return tanh(x[0]) + tanh2(x[0]); }));
  c.push_back(make("tanh_saturates", {in(s, away(20, 1000))}, kTrans,
                   [](const auto& x) { return tanh(x[0]) + tanh2(x[0] * 2); }));
  c.push_back(
      make("maximum", {in(s), in(s)}, kArith, [](const auto& x) { return maximum(x[0], x[1]); }));
  c.push_back(
      make("minimum", {in(s), in(s)}, kArith, [](const auto& x) { return minimum(x[0], x[1]); }));
  c.push_back(make("relu", {in(s)}, kArith,
                   [](const auto& x) { return maximum(x[0], 0) + minimum(0, x[0]) * 0.25; }));
  c.push_back(
      make("clip_scalars", {in(s)}, kArith, [](const auto& x) { return clip(x[0], -0.5, 0.5); }));
  c.push_back(make("clip_arrays", {in(s, uniform(-3, 3)), in({7}, uniform(-1, 0))}, kArith,
                   [](const auto& x) { return clip(x[0], x[1], x[1] + 1); }));
  c.push_back(make("reciprocal", {in(s, away(0.25, 4))}, kArith,
                   [](const auto& x) { return reciprocal(x[0]); }));
  c.push_back(make("where", {in(s), in(s), in(s)}, kArith,
                   [](const auto& x) { return where(x[0] > 0, x[1], x[2]); }));
  c.push_back(make("where_numeric_condition", {in(s, ints(-1, 1)), in(s), in(s)}, kArith,
                   [](const auto& x) { return where(x[0], x[1], x[2]); }));
  c.push_back(make("where_scalars", {in(s)}, kArith,
                   [](const auto& x) { return where(x[0] < 0.25, -1.5, x[0] * 0.5); }));
  c.push_back(
      make("floor", {in(s, uniform(-5, 5))}, kArith, [](const auto& x) { return floor(x[0]); }));
  c.push_back(
      make("ceil", {in(s, uniform(-5, 5))}, kArith, [](const auto& x) { return ceil(x[0]); }));
  c.push_back(make("floor_ceil_on_integers_and_halves", {in(s, grid(-4, 4, 0.5))}, kArith,
                   [](const auto& x) { return floor(x[0]) * 10 + ceil(x[0]); }));
  c.push_back(make("sign", {in(s, grid(-2, 2, 0.5)), in(s, uniform(-1, 1))}, kArith,
                   [](const auto& x) { return sign(x[0]) * 2 + sign(x[1]); }));
  // Compositions.
  c.push_back(make("sig_chain", {in(s), in(s), in(s), in(s), in(s)}, kTrans,
                   [](const auto& x) { return sig(x[0] * x[1] + x[2]) * x[3] - x[4]; }));
  c.push_back(make("exp_of_log", {in(s, log_uniform(0.01, 100))}, kTrans,
                   [](const auto& x) { return exp(log(x[0])) + exp2(log2(x[0])); }));
  c.push_back(make("mask_times_value", {in(s), in(s)}, kArith,
                   [](const auto& x) { return (x[0] > 0) * x[1]; }));
  c.push_back(make("tanh2_affine", {in(s, uniform(-6, 6))}, kTrans,
                   [](const auto& x) { return tanh2(x[0]) * 0.5 + 0.5 - sig2(x[0] * 2); }));
  return c;
}

std::vector<Case> broadcast_cases() {
  std::vector<Case> c;
  const Shape s = {6, 7};
  c.push_back(make("scalar_left", {in(s)}, kArith, [](const auto& x) { return 3 - x[0]; }));
  c.push_back(make("scalar_right", {in(s)}, kArith, [](const auto& x) { return x[0] * 2.5 + 1; }));
  c.push_back(make("scalar_int", {in(s, grid(-8, 8, 0.125))}, kArith,
                   [](const auto& x) { return x[0] * 2 - 7; }));
  c.push_back(make("scalar_not_a_float32", {in(s)}, kArith,
                   [](const auto& x) { return x[0] * 0.1 + 0.3; }));
  c.push_back(
      make("row_vector", {in(s), in({7})}, kArith, [](const auto& x) { return x[0] + x[1]; }));
  c.push_back(make("column_vector", {in(s), in({6, 1})}, kArith,
                   [](const auto& x) { return x[0] * x[1]; }));
  c.push_back(make("outer", {in({6, 1}), in({1, 7})}, kArith,
                   [](const auto& x) { return x[0] * x[1] - x[1]; }));
  c.push_back(make("rank3_with_rank1_and_rank2", {in({3, 4, 5}), in({5}), in({4, 1})}, kArith,
                   [](const auto& x) { return x[0] * x[1] - x[2]; }));
  c.push_back(make("size1_middle_axes", {in({3, 1, 5}), in({1, 4, 1})}, kArith,
                   [](const auto& x) { return x[0] + x[1]; }));
  c.push_back(make("broadcast_to_view", {in({5}, uniform(-2, 2), bcast({3, 4, 5})), in({3, 4, 5})},
                   kArith, [](const auto& x) { return x[0] * x[1]; }));
  c.push_back(make("broadcast_to_middle_axis",
                   {in({3, 1, 5}, uniform(-2, 2), bcast({3, 4, 5})), in({4, 1})}, kArith,
                   [](const auto& x) { return x[0] - x[1]; }));
  c.push_back(make("rank8", {in({2, 1, 2, 1, 2, 1, 2, 3}), in({3}), in({2, 1, 1, 1, 1, 1, 1, 1})},
                   kArith, [](const auto& x) { return x[0] + x[1] * x[2]; }));
  c.push_back(make("rank8_all_broadcast",
                   {in({2, 1, 2, 1, 2, 1, 2, 1}), in({1, 2, 1, 2, 1, 2, 1, 2})}, kArith,
                   [](const auto& x) { return x[0] * x[1]; }));
  c.push_back(make(
      "tree_smaller_than_output", {in({7})}, kArith, [](const auto& x) { return x[0] * 3; },
      into_shape({6, 7})));
  c.push_back(make(
      "tree_leading_ones_dropped", {in({1, 6, 7})}, kArith, [](const auto& x) { return x[0] * 3; },
      into_shape({6, 7})));
  c.push_back(make(
      "tree_size1_axis_broadcast_into_output", {in({6, 1})}, kArith,
      [](const auto& x) { return x[0] + 1; }, into_shape({2, 6, 7})));
  return c;
}

std::vector<Case> view_cases() {
  std::vector<Case> c;
  const Shape s = {6, 7};
  c.push_back(make("transposed_input", {in({7, 6}, uniform(-2, 2), tr()), in(s)}, kArith,
                   [](const auto& x) { return x[0] + x[1]; }));
  c.push_back(make("negative_step_input", {in({6, 14}, uniform(-2, 2), idx("::-1, 1::2")), in(s)},
                   kArith, [](const auto& x) { return x[0] * x[1]; }));
  c.push_back(make("permuted_rank3_input",
                   {in({5, 3, 4}, uniform(-2, 2), perm({1, 2, 0})), in({4, 5})}, kArith,
                   [](const auto& x) { return x[0] - x[1]; }));
  c.push_back(make("reversed_1d_input", {in({9}, uniform(-2, 2), idx("::-1")), in({9})}, kArith,
                   [](const auto& x) { return x[0] - 2 * x[1]; }));
  c.push_back(make("integer_index_input", {in({3, 6, 7}, uniform(-2, 2), idx("1")), in(s)}, kArith,
                   [](const auto& x) { return x[0] + x[1]; }));
  c.push_back(make("strided_both_axes_input", {in({12, 21}, uniform(-2, 2), idx("::2, ::-3"))},
                   kTrans, [](const auto& x) { return exp(x[0]); }));
  c.push_back(
      make("transposed_and_reversed_input",
           {in({7, 6}, uniform(-2, 2), [](const Array& a) { return a.T().index(":, ::-1"); }),
            in({7}, uniform(-2, 2), idx("::-1"))},
           kArith, [](const auto& x) { return x[0] * x[1]; }));
  // Output views.
  c.push_back(make(
      "reversed_output", {in(s), in(s)}, kArith, [](const auto& x) { return x[0] + x[1]; },
      into_index(std::nullopt, "::-1")));
  c.push_back(make(
      "reversed_output_both_axes", {in(s), in({7})}, kArith,
      [](const auto& x) { return x[0] * x[1]; }, into_index(std::nullopt, "::-1, ::-1")));
  c.push_back(make(
      "strided_output", {in(s)}, kArith, [](const auto& x) { return x[0] * 2 + 1; },
      into_index(Shape{8, 14}, "1:7, ::-2")));
  c.push_back(make(
      "transposed_output", {in(s), in(s)}, kArith, [](const auto& x) { return x[0] - x[1]; },
      into_view({7, 6}, tr())));
  c.push_back(make(
      "permuted_rank3_output", {in({3, 4, 5}), in({5})}, kArith,
      [](const auto& x) { return x[0] * x[1]; }, into_view({5, 3, 4}, perm({1, 2, 0}))));
  c.push_back(make(
      "integer_index_output", {in(s)}, kArith, [](const auto& x) { return x[0] + 1; },
      into_index(Shape{3, 6, 7}, "1")));
  c.push_back(make(
      "flex16_strided_output", {in(s, grid(-4, 4, 0.125)), in(s, grid(-2, 2, 0.25))}, kArith,
      [](const auto& x) { return x[0] * x[1]; },
      into_index(Shape{12, 7}, "::2", DType::flex16, 5)));
  c.push_back(make(
      "broadcast_into_reversed_output", {in({7})}, kArith, [](const auto& x) { return x[0] * 0.5; },
      into_index(Shape{6, 7}, "::-1, ::-1")));
  return c;
}

std::vector<Case> dtype_cases() {
  std::vector<Case> c;
  const Shape s = {6, 7};
  // Inputs of every dtype in one tree.
  c.push_back(make("mixed_input_dtypes",
                   {in(s, uniform(-2, 2), DType::flex16), in(s, uniform(-2, 2), DType::bf16),
                    in(s, ints(0, 255), DType::u8), in(s, ints(-1000, 1000), DType::i32)},
                   kArith, [](const auto& x) { return x[0] * x[1] + x[2] - x[3]; }));
  c.push_back(
      make("mixed_input_dtypes_exact",
           {in(s, grid(-4, 4, 0.125), DType::flex16), in(s, grid(-4, 4, 0.125), DType::bf16),
            in(s, ints(0, 255), DType::u8), in(s, ints(-1000, 1000), DType::i32)},
           kArith, [](const auto& x) { return x[0] * x[1] + x[2] - x[3]; }));
  c.push_back(make("bf16_input", {in(s, uniform(-6, 6), DType::bf16)}, kTrans,
                   [](const auto& x) { return sig(x[0]); }));
  c.push_back(make("flex16_input", {in(s, uniform(-3, 3), DType::flex16)}, kTrans,
                   [](const auto& x) { return tanh(x[0]); }));
  c.push_back(make("flex16_inputs_different_iwl",
                   {in(s, uniform(-2, 2), DType::flex16), in(s, uniform(-100, 100), DType::flex16)},
                   kArith, [](const auto& x) { return x[0] + x[1]; }));
  c.push_back(make("u8_input", {in(s, ints(0, 255), DType::u8)}, kArith,
                   [](const auto& x) { return x[0] * 0.5 - 1; }));
  c.push_back(make("u8_mask", {in(s, ints(0, 1), DType::u8), in(s)}, kArith,
                   [](const auto& x) { return where(x[0], x[1], 0); }));
  c.push_back(make("i32_input", {in(s, ints(-1000, 1000), DType::i32)}, kArith,
                   [](const auto& x) { return x[0] / 4 + x[0]; }));
  c.push_back(make("i32_large_integral_exact", {in(s, ints(-16777214, 16777214), DType::i32)},
                   kArith, [](const auto& x) { return x[0] + 1; }));
  // Output dtypes.
  c.push_back(make(
      "bf16_output", {in(s), in(s), in(s)}, kArith,
      [](const auto& x) { return x[0] * x[1] + x[2]; }, to(DType::bf16)));
  c.push_back(make(
      "bf16_output_rounds_half_even", {in(s, grid(-8, 8, 0.125)), in(s, grid(-8, 8, 0.125))},
      kArith, [](const auto& x) { return x[0] * x[1] + x[0]; }, to(DType::bf16)));
  c.push_back(make(
      "flex16_output_fixed_exact", {in(s, grid(-8, 8, 0.125)), in(s, grid(-8, 8, 0.125))}, kArith,
      [](const auto& x) { return x[0] * x[1] + x[1]; }, to(DType::flex16, 7)));
  c.push_back(make(
      "flex16_output_fixed_saturates", {in(s, grid(-2, 2, 0.125)), in(s, grid(-2, 2, 0.125))},
      kArith, [](const auto& x) { return x[0] + x[1]; }, to(DType::flex16, 0)));
  {
    Out o = to(DType::flex16, 0);
    o.options.iwl = 3;  // replaces the base's iwl 0 before the write
    c.push_back(make(
        "flex16_output_fixed_explicit_iwl", {in(s, grid(-2, 2, 0.125)), in(s, grid(-2, 2, 0.125))},
        kArith, [](const auto& x) { return x[0] * x[1]; }, o));
  }
  c.push_back(make(
      "flex16_output_exact_policy", {in(s, uniform(-3, 3)), in(s, uniform(-3, 3))}, kArith,
      [](const auto& x) { return x[0] * x[1]; }, exact_flex16()));
  c.push_back(make(
      "flex16_output_exact_policy_small", {in(s)}, kArith,
      [](const auto& x) { return x[0] * 0.001; }, exact_flex16()));
  c.push_back(make(
      "flex16_output_exact_policy_large", {in(s)}, kArith,
      [](const auto& x) { return x[0] * 1000; }, exact_flex16()));
  c.push_back(make(
      "flex16_output_exact_policy_transcendental", {in(s, uniform(-4, 4))}, kTrans,
      [](const auto& x) { return exp(x[0]); }, exact_flex16()));
  c.push_back(make(
      "flex16_output_where", {in(s), in(s)}, kArith,
      [](const auto& x) { return where(x[0] > x[1], x[0], x[1]); }, to(DType::flex16, 2)));
  c.push_back(make(
      "flex16_output_comparison", {in(s, ints(-2, 2)), in(s, ints(-2, 2))}, kArith,
      [](const auto& x) { return lt(x[0], x[1]) - ge(x[0], x[1]) * 0.5; }, to(DType::flex16, 1)));
  c.push_back(make(
      "flex16_output_transcendental", {in(s, uniform(-8, 8))}, kTrans,
      [](const auto& x) { return sig(x[0]); }, to(DType::flex16, 1)));
  c.push_back(make(
      "flex16_output_from_flex16_inputs",
      {in(s, uniform(-2, 2), DType::flex16), in(s, uniform(-100, 100), DType::flex16)}, kArith,
      [](const auto& x) { return x[0] + x[1]; }, to(DType::flex16, 8)));
  c.push_back(make(
      "u8_output_truncates_and_saturates", {in(s, uniform(-10, 100))}, kArith,
      [](const auto& x) { return x[0] * 3; }, to(DType::u8)));
  c.push_back(make(
      "i32_output_truncates_and_saturates", {in(s, uniform(-3000, 3000))}, kArith,
      [](const auto& x) { return x[0] * 1e6; }, to(DType::i32)));
  c.push_back(make(
      "i32_output_small", {in(s, uniform(-50, 50))}, kArith,
      [](const auto& x) { return x[0] * 0.75; }, to(DType::i32)));
  return c;
}

std::vector<Case> reduction_cases() {
  std::vector<Case> c;
  const Shape s3 = {4, 5, 6};
  // Every reduction over every axis of a rank-3 array, negative axes, and over all axes.
  for (int r = kSum; r <= kArgmin; ++r) {
    for (int axis : {0, 1, 2, -1, -2, -3}) {
      std::string name = reduction_name(r);
      name += axis < 0 ? "_axis_m" : "_axis_";
      name += std::to_string(axis < 0 ? -axis : axis);
      c.push_back(make(name, {in(s3, uniform(-4, 4))}, kReduce,
                       [r, axis](const auto& x) { return reduce_by(r, x[0], axis); }));
    }
    c.push_back(make(std::string(reduction_name(r)) + "_all", {in(s3, uniform(-4, 4))}, kReduce,
                     [r](const auto& x) { return reduce_by(r, x[0], std::nullopt); }));
    // Through a transposed, reversed view: indices count along the view, not the storage.
    c.push_back(
        make(std::string(reduction_name(r)) + "_axis_1_of_view",
             {in({6, 5, 4}, uniform(-4, 4), [](const Array& a) { return a.T().index(":, ::-1"); })},
             kReduce, [r](const auto& x) { return reduce_by(r, x[0], 1); }));
    c.push_back(
        make(std::string(reduction_name(r)) + "_all_of_view",
             {in({6, 5, 4}, uniform(-4, 4), [](const Array& a) { return a.T().index("::-1"); })},
             kReduce, [r](const auto& x) { return reduce_by(r, x[0], std::nullopt); }));
    // A long axis (several chunks / threads).
    c.push_back(make(std::string(reduction_name(r)) + "_long_axis", {in({3, 2000}, uniform(-4, 4))},
                     kReduce, [r](const auto& x) { return reduce_by(r, x[0], -1); }));
  }
  c.push_back(make("sum_exact", {in(s3, grid(-8, 8, 0.125))}, kReduce,
                   [](const auto& x) { return sum(x[0], 1); }));
  c.push_back(make("mean_pow2_exact", {in({4, 8}, grid(-8, 8, 0.125))}, kReduce,
                   [](const auto& x) { return mean(x[0], 1); }));
  c.push_back(make("sum_of_expression", {in(s3), in({6})}, kReduce,
                   [](const auto& x) { return sum(x[0] * x[1], 1); }));
  c.push_back(
      make("max_of_abs", {in(s3)}, kReduce, [](const auto& x) { return max(abs(x[0]), 0); }));
  c.push_back(make("sum_of_broadcast", {in({5}), in({4, 1})}, kReduce,
                   [](const auto& x) { return sum(x[0] + x[1], 0); }));
  c.push_back(make("sum_u8", {in(s3, ints(0, 255), DType::u8)}, kReduce,
                   [](const auto& x) { return sum(x[0], -1); }));
  c.push_back(make("argmax_flex16", {in(s3, uniform(-4, 4), DType::flex16)}, kReduce,
                   [](const auto& x) { return argmax(x[0], 1); }));
  c.push_back(make("min_bf16", {in(s3, uniform(-4, 4), DType::bf16)}, kReduce,
                   [](const auto& x) { return min(x[0], 0); }));
  c.push_back(make("mean_i32_all", {in(s3, ints(-100, 100), DType::i32)}, kReduce,
                   [](const auto& x) { return mean(x[0]); }));
  c.push_back(make(
      "argmax_into_i32", {in(s3)}, kReduce, [](const auto& x) { return argmax(x[0], 2); },
      to(DType::i32)));
  c.push_back(make(
      "sum_into_flex16_exact_policy", {in(s3)}, kReduce, [](const auto& x) { return sum(x[0], 1); },
      exact_flex16()));
  c.push_back(make(
      "sum_broadcast_into_output", {in(s3)}, kReduce, [](const auto& x) { return sum(x[0], 1); },
      into_shape({4, 3, 6})));
  c.push_back(make(
      "sum_all_into_rank1", {in(s3)}, kReduce, [](const auto& x) { return sum(x[0]); },
      into_shape({1})));
  c.push_back(make(
      "max_all_into_2x3", {in({5, 6})}, kReduce, [](const auto& x) { return max(x[0]); },
      into_shape({2, 3})));
  c.push_back(
      make("sum_all_large", {in({50, 40})}, kReduce, [](const auto& x) { return sum(x[0]); }));
  // A reduction feeding a broadcast (two kernels).
  c.push_back(make("minus_row_max", {in({6, 9})}, kReduce,
                   [](const auto& x) { return x[0] - max(x[0], 1); }));
  c.push_back(make("softmax_rows", {in({6, 9}, uniform(-5, 5))}, kTrans, [](const auto& x) {
    return exp(x[0] - max(x[0], 1)) / sum(exp(x[0] - max(x[0], 1)), 1);
  }));
  // Long rows: the row-fused kernel's widest blocks (512 and 1024 threads a row), more rows
  // than the GPU holds blocks at once.
  c.push_back(make(
      "softmax_long_rows", {in({300, 16384}, uniform(-5, 5))}, kTrans,
      [](const auto& x) { return exp(x[0] - max(x[0], 1)) / sum(exp(x[0] - max(x[0], 1)), 1); }));
  c.push_back(make("minus_row_max_long_rows", {in({270, 12288})}, kReduce,
                   [](const auto& x) { return x[0] - max(x[0], 1); }));
  // Rows split over a cluster of blocks on devices that have clusters: 2 blocks (65536 and 50001,
  // the second block ragged), 4 (100000), two reductions exchanging (value, index) and double
  // partials.
  c.push_back(make(
      "softmax_cluster_rows", {in({20, 65536}, uniform(-5, 5))}, kTrans,
      [](const auto& x) { return exp(x[0] - max(x[0], 1)) / sum(exp(x[0] - max(x[0], 1)), 1); }));
  c.push_back(make("argmax_and_mean_cluster_rows", {in({5, 50001})}, kReduce,
                   [](const auto& x) { return x[0] * argmax(x[0], 1) - mean(x[0], 1); }));
  c.push_back(make("minus_row_sum_cluster_rows", {in({3, 100000})}, kReduce,
                   [](const auto& x) { return x[0] - sum(x[0], 1); }));
  // Columns held by a warp's lanes, split over warps and a cluster's blocks (enough columns to
  // fill a device's multiprocessors, else the stage-by-stage kernels run): 8 blocks of 16 warps,
  // a ragged column over 4 blocks, a middle axis with (value, index) and double partials, a
  // flex16 output.
  c.push_back(make("minus_column_max_fused", {in({4096, 640})}, kReduce,
                   [](const auto& x) { return x[0] - max(x[0], 0); }));
  c.push_back(make(
      "softmax_columns_fused", {in({1000, 1100}, uniform(-5, 5))}, kTrans,
      [](const auto& x) { return exp(x[0] - max(x[0], 0)) / sum(exp(x[0] - max(x[0], 0)), 0); }));
  c.push_back(make("argmin_and_sum_middle_axis_fused", {in({3, 300, 1500})}, kReduce,
                   [](const auto& x) { return x[0] * argmin(x[0], 1) - sum(x[0], 1); }));
  c.push_back(make(
      "minus_column_min_fused_flex16", {in({1024, 1056}, uniform(-1, 1))}, kReduce,
      [](const auto& x) { return x[0] - min(x[0], 0); }, to(DType::flex16, 1)));
  c.push_back(make(
      "softmax_columns_of_view", {in({9, 6}, uniform(-5, 5), tr())}, kTrans,
      [](const auto& x) { return exp(x[0] - max(x[0], 0)) / sum(exp(x[0] - max(x[0], 0)), 0); }));
  c.push_back(make("center_last_axis", {in(s3)}, kReduce,
                   [](const auto& x) { return x[0] - mean(x[0], -1); }));
  c.push_back(make("normalize_columns", {in({8, 5})}, kTrans, [](const auto& x) {
    return (x[0] - mean(x[0], 0)) / sqrt(mean(sqr(x[0] - mean(x[0], 0)), 0) + 1e-5);
  }));
  c.push_back(make("one_hot_of_row_max", {in({6, 9})}, kReduce,
                   [](const auto& x) { return eq(x[0], max(x[0], 1)); }));
  c.push_back(make("logsumexp", {in({6, 9}, uniform(-5, 5))}, kTrans, [](const auto& x) {
    return log(sum(exp(x[0] - max(x[0], 1)), 1)) + max(x[0], 1);
  }));
  c.push_back(make("minus_global_mean", {in(s3)}, kReduce,
                   [](const auto& x) { return x[0] - mean(x[0]); }));
  return c;
}

std::vector<Case> form_cases() {
  std::vector<Case> c;
  const Shape s = {6, 7};
  const Gen g = grid(-4, 4, 0.125);
  auto f = [](const auto& x) { return x[0] * x[1] + 1; };
  c.push_back(
      make("form_assign_operator", {in(s, g), in(s, g)}, kArith, f, with_form(Form::assign_op)));
  c.push_back(make("form_assign_operator_bf16", {in(s), in(s)}, kArith, f,
                   with_form(Form::assign_op, to(DType::bf16))));
  c.push_back(make("form_index_whole", {in(s, g), in(s, g)}, kArith, f, with_form(Form::index_op)));
  c.push_back(make("form_index_reversed", {in(s, g), in(s, g)}, kArith, f,
                   with_form(Form::index_op, into_index(std::nullopt, "::-1"))));
  c.push_back(make("form_index_strided", {in(s, g), in({7}, g)}, kArith, f,
                   with_form(Form::index_op, into_index(Shape{7, 14}, "1:, ::2"))));
  c.push_back(make("form_plus_eq", {in(s, g), in(s, g)}, kArith, f, with_form(Form::plus_eq)));
  c.push_back(make("form_minus_eq", {in(s, g), in(s, g)}, kArith, f, with_form(Form::minus_eq)));
  c.push_back(make("form_times_eq", {in(s, g), in(s, g)}, kArith, f, with_form(Form::times_eq)));
  c.push_back(make(
      "form_div_eq", {in(s, away(0.5, 4))}, kArith, [](const auto& x) { return x[0]; },
      with_form(Form::div_eq)));
  c.push_back(make("form_plus_eq_view", {in(s, g), in(s, g)}, kArith, f,
                   with_form(Form::plus_eq, into_index(Shape{7, 14}, "1:, ::-2"))));
  c.push_back(make(
      "form_plus_eq_broadcast", {in({7}, g)}, kArith, [](const auto& x) { return x[0]; },
      with_form(Form::plus_eq, into_shape({6, 7}))));
  c.push_back(make("form_plus_eq_flex16", {in(s, g), in(s, g)}, kArith, f,
                   with_form(Form::plus_eq, to(DType::flex16, 7))));
  c.push_back(make(
      "form_evaluate_f32", {in(s), in({7})}, kTrans, [](const auto& x) { return sig(x[0]) * x[1]; },
      with_form(Form::evaluate)));
  c.push_back(make("form_evaluate_bf16", {in(s), in(s)}, kArith, f,
                   with_form(Form::evaluate, to(DType::bf16))));
  c.push_back(make("form_evaluate_flex16", {in(s), in(s)}, kArith, f,
                   with_form(Form::evaluate, to(DType::flex16))));
  c.push_back(make(
      "form_evaluate_reduction", {in({4, 5, 6})}, kReduce,
      [](const auto& x) { return sum(x[0], 1); }, with_form(Form::evaluate)));
  return c;
}

std::vector<Case> all_cases() {
  std::vector<Case> all;
  for (auto part : {elementwise_cases(), broadcast_cases(), view_cases(), dtype_cases(),
                    reduction_cases(), form_cases()})
    for (Case& c : part) all.push_back(std::move(c));
  return all;
}

// ---- running a case ---------------------------------------------------------------------------

std::vector<float> output_init(DType dtype, int iwl, std::int64_t n, Rng& rng) {
  switch (dtype) {
    case DType::flex16:
      return generate(uniform(-0.9 * std::ldexp(1.0, iwl), 0.9 * std::ldexp(1.0, iwl)), n, rng);
    case DType::u8:
      return generate(ints(0, 255), n, rng);
    case DType::i32:
      return generate(ints(-1000, 1000), n, rng);
    default:
      return generate(uniform(-50, 50), n, rng);
  }
}

Array make_array(const std::vector<float>& data, const Shape& shape, DType dtype,
                 std::optional<int> iwl = std::nullopt) {
  Flex16EncodeOptions options;
  if (dtype == DType::flex16) options.iwl = iwl;
  return Array::from_floats(std::span<const float>(data), shape, dtype, device(), options);
}

Array select(const Array& base, const Out& o) {
  Array v = base;
  if (!o.index.empty()) v = v.index(o.index);
  if (o.view) v = o.view(v);
  return v;
}

// The raw contents of every element, for "unchanged" checks (flex16 compares mantissas, so a
// changed exponent is not mistaken for unchanged data or the reverse).
std::vector<double> raw(const Array& a) {
  if (a.dtype() != DType::flex16) return a.to_doubles();
  auto m = a.to_vector<std::int16_t>();
  return std::vector<double>(m.begin(), m.end());
}

void check_flex16(const Array& out, const Tensor& expected, const Case& c) {
  const Flex16Stats stats = out.stats();
  if (c.out.options.iwl_policy == IwlPolicy::exact) {
    auto [lo, hi] = exprref::exact_policy_iwl_range(expected, c.tol);
    EXPECT_TRUE(out.iwl() >= lo && out.iwl() <= hi)
        << "exact policy chose iwl " << out.iwl() << "; flex16_iwl_for_max of the result gives "
        << lo << (hi != lo ? " or " + std::to_string(hi) : std::string());
    EXPECT_EQ(stats.saturated, 0u) << "exact policy must saturate nothing";
  } else {
    EXPECT_EQ(out.iwl(), c.out.options.iwl.value_or(c.out.iwl)) << "fixed policy keeps the iwl";
  }
  const auto want = exprref::expect_flex16_stats(expected, out.iwl(), c.tol);
  EXPECT_TRUE(stats.saturated >= want.saturated_min && stats.saturated <= want.saturated_max)
      << "stats().saturated " << stats.saturated << ", expected " << want.saturated_min
      << (want.saturated_max != want.saturated_min ? " to " + std::to_string(want.saturated_max)
                                                   : std::string());
  EXPECT_EQ(stats.nan_count, want.nan_count) << "stats().nan_count";
  int max_m = 0;
  for (std::int16_t m : out.to_vector<std::int16_t>()) max_m = std::max(max_m, std::abs(int{m}));
  EXPECT_EQ(stats.max_abs_m, max_m) << "stats().max_abs_m against the stored mantissas";
}

void run_case(const Case& c) {
  Rng rng{fnv1a(c.name)};
  std::vector<Expr> leaves;
  std::vector<Tensor> refs;
  for (const In& input : c.inputs) {
    auto data = generate(input.gen, shape_numel(input.shape), rng);
    Array base = make_array(data, input.shape, input.dtype);
    Array view = input.view ? input.view(base) : base;
    leaves.emplace_back(view);
    refs.push_back(Tensor::leaf(view.shape(), view.to_doubles()));
  }
  const Tensor want = c.ref(refs);
  const Expr e = c.expr(leaves);
  EXPECT_EQ(e.shape(), want.shape) << "Expr::shape() of the tree";
  CheckReport report;

  if (c.out.form == Form::evaluate) {
    std::optional<Array> result = exprref::run_evaluate(e, c.out.dtype);
    if (!result) GTEST_SKIP() << "flexkit/expr.hpp declares no evaluate(e, dtype)";
    EXPECT_EQ(result->device(), device()) << "evaluate places the result on the operands' device";
    EXPECT_EQ(result->dtype(), c.out.dtype);
    EXPECT_TRUE(exprref::output_matches(*result, want, c.tol, &report));
    if (c.out.dtype == DType::flex16) {  // evaluate's flex16 results use the exact policy
      auto [lo, hi] = exprref::exact_policy_iwl_range(want, c.tol);
      EXPECT_TRUE(result->iwl() >= lo && result->iwl() <= hi) << "iwl " << result->iwl();
      EXPECT_EQ(result->stats().saturated, 0u);
    }
    return;
  }
  if (!exprref::form_declared(c.out.form))
    GTEST_SKIP() << "flexkit's public headers declare no `" << exprref::form_name(c.out.form)
                 << "` for Array and Expr";

  const Shape base_shape = c.out.shape.value_or(want.shape);
  Array base = make_array(output_init(c.out.dtype, c.out.iwl, shape_numel(base_shape), rng),
                          base_shape, c.out.dtype, c.out.iwl);
  Array out = select(base, c.out);
  const std::vector<double> base_before = raw(base);
  // Which base elements the output view covers, found by reading positions through the same view.
  Array positions =
      Array::arange(shape_numel(base_shape), DType::i32, device()).reshape(base_shape);
  std::vector<bool> covered(base_before.size(), false);
  for (double p : select(positions, c.out).to_doubles())
    covered[static_cast<std::size_t>(p)] = true;

  Tensor target = want;
  const Tensor old = Tensor::leaf(out.shape(), out.to_doubles());
  switch (c.out.form) {
    case Form::plus_eq:
      target = old + want;
      break;
    case Form::minus_eq:
      target = old - want;
      break;
    case Form::times_eq:
      target = old * want;
      break;
    case Form::div_eq:
      target = old / want;
      break;
    default:
      break;
  }
  const Tensor expected = exprref::broadcast_to(target, out.shape());

  ASSERT_TRUE(exprref::run_form(c.out.form, out, e, c.out.options, &base, c.out.index));

  EXPECT_TRUE(exprref::output_matches(out, expected, c.tol, &report))
      << "written with " << exprref::form_name(c.out.form);
  EXPECT_GE(2 * report.checked, report.checked + report.unstable)
      << "most elements sit too close to a discontinuity to be compared; the case needs other data";
  if (c.out.dtype == DType::flex16) check_flex16(out, expected, c);
  const std::vector<double> base_after = raw(base);
  std::int64_t touched = 0;
  for (std::size_t i = 0; i < base_after.size(); ++i)
    if (!covered[i] && base_after[i] != base_before[i]) ++touched;
  EXPECT_EQ(touched, 0) << "elements outside the output view were written";
}

class ExprOps : public ::testing::TestWithParam<Case> {};

TEST_P(ExprOps, MatchesFloat64Reference) {
  run_case(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Table, ExprOps, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

// Column strips, a CUDA kernel (4 neighbouring columns a thread, held in registers and shared
// memory; at least as many blocks as a device of 132 multiprocessors has): 8 blocks of 16
// elements a thread, ragged columns and rows over 6 blocks, a middle axis with (value, index)
// and double partials, f32 × bf16 operands, a flex16 output, a column in registers alone.
std::vector<Case> strip_cases() {
  std::vector<Case> c;
  c.push_back(make("minus_column_max_strips", {in({4096, 1088})}, kReduce,
                   [](const auto& x) { return x[0] - max(x[0], 0); }));
  c.push_back(make(
      "softmax_columns_strips_ragged", {in({3000, 2052}, uniform(-5, 5))}, kTrans,
      [](const auto& x) { return exp(x[0] - max(x[0], 0)) / sum(exp(x[0] - max(x[0], 0)), 0); }));
  c.push_back(make("argmin_and_mean_middle_axis_strips", {in({3, 600, 2048})}, kReduce,
                   [](const auto& x) { return x[0] * argmin(x[0], 1) - mean(x[0], 1); }));
  c.push_back(make("product_minus_column_max_strips",
                   {in({2048, 1280}), in({2048, 1280}, uniform(-2, 2), DType::bf16)}, kReduce,
                   [](const auto& x) { return x[0] * x[1] - max(x[0] * x[1], 0); }));
  c.push_back(make(
      "minus_column_min_strips_flex16", {in({2048, 2176}, uniform(-1, 1))}, kReduce,
      [](const auto& x) { return x[0] - min(x[0], 0); }, to(DType::flex16, 1)));
  c.push_back(make("minus_column_sum_strips_registers", {in({60, 8448})}, kReduce,
                   [](const auto& x) { return x[0] - sum(x[0], 0); }));
  return c;
}

class ExprStrips : public ::testing::TestWithParam<Case> {};

TEST_P(ExprStrips, MatchesFloat64Reference) {
  // The CPU backend's column reductions are the table's; these shapes only add time there.
  if (device().is_cpu()) GTEST_SKIP() << "column strips are a CUDA kernel";
  run_case(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Strips, ExprStrips, ::testing::ValuesIn(strip_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

// Names are how a failure is found again; a duplicate would make gtest refuse the whole table.
TEST(ExprOpsTable, CaseNamesAreUniqueAndCoverEveryOp) {
  auto cases = all_cases();
  std::vector<std::string> names;
  for (const Case& c : cases) names.push_back(c.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end());
  EXPECT_GT(cases.size(), 150u);
}

}  // namespace
}  // namespace flexkit
