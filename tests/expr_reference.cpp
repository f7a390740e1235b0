// The float64 reference for fused expressions (see expr_reference.hpp). Written from
// include/flexkit/expr.hpp and NumPy's rules only; nothing here reads flexkit's expression code, so
// the two can disagree.
#include "expr_reference.hpp"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <functional>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "flexkit/flex16.hpp"

namespace exprref {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kLn2 = 0.69314718055994530942;

// True when x survives a round trip through float32, i.e. a correctly rounded float32 op whose
// exact result is x returns x. NaN and infinities are propagated exactly, so they count too.
bool fits_f32(double x) {
  if (std::isnan(x) || std::isinf(x)) return true;
  if (std::fabs(x) > FLT_MAX) return false;
  return static_cast<double>(static_cast<float>(x)) == x;
}

// float32 of a double, overflow going to infinity (a plain cast of such a value is undefined).
float to_f32(double x) {
  if (std::isnan(x)) return std::numeric_limits<float>::quiet_NaN();
  if (x > FLT_MAX) return std::numeric_limits<float>::infinity();
  if (x < -FLT_MAX) return -std::numeric_limits<float>::infinity();
  return static_cast<float>(x);
}

bool is_pow2(double x) {
  if (!(x > 0) || std::isinf(x)) return false;
  int e = 0;
  return std::frexp(x, &e) == 0.5;
}

// The error-scale term one rounding adds: none when the inputs were exact, the op is correctly
// rounded (or exact by construction) and its exact result is a float32; |r| otherwise.
double rounding(double r, bool inputs_exact, bool correctly_rounded) {
  if (inputs_exact && correctly_rounded && fits_f32(r)) return 0.0;
  return std::isnan(r) || std::isinf(r) ? 0.0 : std::fabs(r);
}

// Whether float32 error of scale `m` could move a value `distance` away from a jump across it.
bool near_jump(double distance, double m) {
  return m > 0 && std::fabs(distance) <= kUnstableRel * m + kUnstableAbs;
}

// A derivative-weighted error term; 0 * inf (an exact input at a pole) contributes nothing.
double weighted(double derivative, double m) {
  return m == 0 ? 0.0 : std::fabs(derivative) * m;
}

struct Elem {
  double v;
  double m;
};
struct Result {
  double v;
  double m;
  bool unstable = false;
};

std::vector<std::int64_t> row_major_strides(const Shape& shape) {
  std::vector<std::int64_t> s(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) s[d] = s[d + 1] * shape[d + 1];
  return s;
}

// Strides that read `from` (row-major, aligned to the right) at the positions of `to`: 0 on
// broadcast axes, and leading axes of `from` beyond `to`'s rank (all size 1) ignored.
std::vector<std::int64_t> broadcast_strides(const Shape& from, const Shape& to) {
  std::vector<std::int64_t> own = row_major_strides(from);
  std::vector<std::int64_t> out(to.size(), 0);
  const int shift = static_cast<int>(to.size()) - static_cast<int>(from.size());
  for (int d = 0; d < static_cast<int>(from.size()); ++d) {
    const int td = d + shift;
    if (td < 0) continue;
    out[td] = from[d] == 1 ? 0 : own[d];
  }
  return out;
}

// Calls visit(linear_out, offsets[k]) for every element of `shape` in row-major order, where
// offsets[k] is the element's position in operand k (given by its strides).
void for_each_index(
    const Shape& shape, const std::vector<std::vector<std::int64_t>>& strides,
    const std::function<void(std::int64_t, const std::vector<std::int64_t>&)>& visit) {
  const std::int64_t n = numel(shape);
  if (n == 0) return;
  std::vector<std::int64_t> counter(shape.size(), 0);
  std::vector<std::int64_t> offsets(strides.size(), 0);
  for (std::int64_t i = 0; i < n; ++i) {
    visit(i, offsets);
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
      if (++counter[d] < shape[d]) {
        for (std::size_t k = 0; k < strides.size(); ++k) offsets[k] += strides[k][d];
        break;
      }
      for (std::size_t k = 0; k < strides.size(); ++k) offsets[k] -= strides[k][d] * (shape[d] - 1);
      counter[d] = 0;
    }
  }
}

Tensor make(Shape shape) {
  Tensor t;
  const auto n = static_cast<std::size_t>(numel(shape));
  t.shape = std::move(shape);
  t.v.assign(n, 0.0);
  t.mag.assign(n, 0.0);
  t.unstable.assign(n, 0);
  return t;
}

// Elementwise op over broadcast operands; f sees each operand's value and error scale.
Tensor map(std::initializer_list<const Tensor*> args,
           const std::function<Result(const Elem* in)>& f) {
  Shape shape = (*args.begin())->shape;
  for (const Tensor* a : args) shape = broadcast_shapes(shape, a->shape);
  std::vector<std::vector<std::int64_t>> strides;
  for (const Tensor* a : args) strides.push_back(broadcast_strides(a->shape, shape));
  Tensor r = make(shape);
  for_each_index(shape, strides, [&](std::int64_t i, const std::vector<std::int64_t>& off) {
    Elem in[3];
    bool unstable = false;
    std::size_t k = 0;
    for (const Tensor* a : args) {
      const auto o = static_cast<std::size_t>(off[k]);
      in[k] = {a->v[o], a->mag[o]};
      unstable = unstable || a->unstable[o];
      ++k;
    }
    Result res = f(in);
    r.v[i] = res.v;
    r.mag[i] = res.m;
    r.unstable[i] = unstable || res.unstable;
  });
  return r;
}

Tensor unary(const Tensor& a, const std::function<Result(Elem)>& f) {
  return map({&a}, [&](const Elem* in) { return f(in[0]); });
}

Tensor binary(const Tensor& a, const Tensor& b, const std::function<Result(Elem, Elem)>& f) {
  return map({&a, &b}, [&](const Elem* in) { return f(in[0], in[1]); });
}

// A transcendental function: never assumed exact, error = |f'| * input error + |f(x)|.
Tensor smooth(const Tensor& a, double (*f)(double), double (*df)(double, double)) {
  return unary(a, [&](Elem x) {
    const double r = f(x.v);
    return Result{r, weighted(df(x.v, r), x.m) + rounding(r, false, false)};
  });
}

Tensor compare(const Tensor& a, const Tensor& b, bool (*op)(double, double)) {
  return binary(a, b, [&](Elem x, Elem y) {
    return Result{op(x.v, y.v) ? 1.0 : 0.0, 0.0, near_jump(x.v - y.v, x.m + y.m)};
  });
}

int normalize_axis(int axis, int rank, const char* op) {
  if (axis < -rank || axis >= rank) {
    std::ostringstream msg;
    msg << "exprref::" << op << ": axis " << axis << " is out of range for rank " << rank;
    throw std::out_of_range(msg.str());
  }
  return axis < 0 ? axis + rank : axis;
}

// Reduction over the axes in `reduced` (kept with size 1). The reducer sees the n reduced
// elements in row-major order of the reduced axes, so k is the index along a single axis, or the
// row-major flat index when every axis is reduced.
Tensor reduce(const Tensor& a, const std::vector<bool>& reduced, const char* op,
              const std::function<Result(const std::vector<Elem>&, bool)>& f) {
  Shape out_shape = a.shape;
  Shape red_shape;
  std::vector<std::int64_t> own = row_major_strides(a.shape);
  std::vector<std::int64_t> red_strides, kept_strides(a.shape.size(), 0);
  for (std::size_t d = 0; d < a.shape.size(); ++d) {
    if (reduced[d]) {
      red_shape.push_back(a.shape[d]);
      red_strides.push_back(own[d]);
      out_shape[d] = 1;
    } else {
      kept_strides[d] = own[d];
    }
  }
  const std::int64_t n = numel(red_shape);
  if (n == 0) {
    throw std::invalid_argument(std::string("exprref::") + op +
                                ": reduction over an empty axis of " + shape_text(a.shape));
  }
  std::vector<std::int64_t> red_offsets;
  red_offsets.reserve(static_cast<std::size_t>(n));
  for_each_index(red_shape, {red_strides}, [&](std::int64_t, const std::vector<std::int64_t>& off) {
    red_offsets.push_back(off[0]);
  });
  Tensor r = make(out_shape);
  std::vector<Elem> items(static_cast<std::size_t>(n));
  for_each_index(out_shape, {kept_strides},
                 [&](std::int64_t i, const std::vector<std::int64_t>& off) {
                   bool unstable = false;
                   for (std::size_t k = 0; k < items.size(); ++k) {
                     const auto o = static_cast<std::size_t>(off[0] + red_offsets[k]);
                     items[k] = {a.v[o], a.mag[o]};
                     unstable = unstable || a.unstable[o];
                   }
                   Result res = f(items, unstable);
                   r.v[i] = res.v;
                   r.mag[i] = res.m;
                   r.unstable[i] = unstable || res.unstable;
                 });
  return r;
}

std::vector<bool> one_axis(const Tensor& a, int axis, const char* op) {
  std::vector<bool> reduced(a.shape.size(), false);
  reduced[static_cast<std::size_t>(normalize_axis(axis, static_cast<int>(a.shape.size()), op))] =
      true;
  return reduced;
}

std::vector<bool> all_axes(const Tensor& a) {
  return std::vector<bool>(a.shape.size(), true);
}

// The largest power of two dividing x (x != 0, finite).
double lowest_bit(double x) {
  int e = 0;
  const double f = std::frexp(std::fabs(x), &e);
  const auto mantissa = static_cast<std::uint64_t>(std::ldexp(f, 53));
  return std::ldexp(1.0, e - 53 + std::countr_zero(mantissa));
}

// A float32 sum of exact values is exact in any order when every partial sum is a multiple of
// the values' common power-of-two grain with fewer than 24 significant bits.
Result sum_items(const std::vector<Elem>& items) {
  double s = 0, abs_sum = 0, m_sum = 0, grain = std::numeric_limits<double>::infinity();
  bool exact = true;
  for (const Elem& e : items) {
    s += e.v;
    abs_sum += std::fabs(e.v);
    m_sum += e.m;
    if (e.m > 0 || !fits_f32(e.v)) exact = false;
    if (e.v != 0 && std::isfinite(e.v)) grain = std::min(grain, lowest_bit(e.v));
  }
  if (std::isnan(s) || std::isinf(s)) return {s, 0.0};
  if (exact && abs_sum > 0) exact = abs_sum / grain < 16777216.0;
  const double adds = static_cast<double>(items.size() - 1);
  return {s, m_sum + (exact ? 0.0 : adds * abs_sum)};
}

Result extreme_items(const std::vector<Elem>& items, bool take_max) {
  double best = items[0].v, m = 0;
  for (const Elem& e : items) {
    if (std::isnan(e.v)) return {kNaN, 0.0};
    if (take_max ? e.v > best : e.v < best) best = e.v;
    m = std::max(m, e.m);
  }
  return {best, m};
}

Result arg_items(const std::vector<Elem>& items, bool take_max) {
  std::size_t best = 0;
  for (std::size_t k = 0; k < items.size(); ++k) {
    if (std::isnan(items[k].v)) return {static_cast<double>(k), 0.0};  // NumPy: first NaN
    if (take_max ? items[k].v > items[best].v : items[k].v < items[best].v) best = k;
  }
  bool unstable = false;
  for (std::size_t k = 0; k < items.size(); ++k)
    if (k != best && near_jump(items[k].v - items[best].v, items[k].m + items[best].m))
      unstable = true;
  return {static_cast<double>(best), 0.0, unstable};
}

double sig_value(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

}  // namespace

// ---- tensors ---------------------------------------------------------------------------------

Tensor::Tensor(double scalar) {
  v = {scalar};
  mag = {fits_f32(scalar) ? 0.0 : std::fabs(scalar)};
  unstable = {0};
}

Tensor Tensor::leaf(Shape shape, std::vector<double> values) {
  if (numel(shape) != static_cast<std::int64_t>(values.size()))
    throw std::invalid_argument("exprref::Tensor::leaf: " + shape_text(shape) + " needs " +
                                std::to_string(numel(shape)) + " values, got " +
                                std::to_string(values.size()));
  Tensor t = make(std::move(shape));
  t.v = std::move(values);
  return t;
}

std::int64_t numel(const Shape& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

std::string shape_text(const Shape& shape) {
  std::ostringstream s;
  s << "(";
  for (std::size_t d = 0; d < shape.size(); ++d) s << (d ? ", " : "") << shape[d];
  s << (shape.size() == 1 ? ",)" : ")");
  return s.str();
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  const std::size_t rank = std::max(a.size(), b.size());
  Shape out(rank, 1);
  for (std::size_t i = 0; i < rank; ++i) {
    const std::int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    const std::int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1)
      throw std::invalid_argument("exprref: shapes " + shape_text(a) + " and " + shape_text(b) +
                                  " do not broadcast");
    out[rank - 1 - i] = da == 1 ? db : da;
  }
  return out;
}

Tensor broadcast_to(const Tensor& t, const Shape& shape) {
  const int extra = static_cast<int>(t.shape.size()) - static_cast<int>(shape.size());
  for (int d = 0; d < extra; ++d)
    if (t.shape[static_cast<std::size_t>(d)] != 1)
      throw std::invalid_argument("exprref: " + shape_text(t.shape) + " cannot be assigned to " +
                                  shape_text(shape));
  for (std::size_t i = 0; i < std::min(t.shape.size(), shape.size()); ++i) {
    const std::int64_t from = t.shape[t.shape.size() - 1 - i];
    if (from != 1 && from != shape[shape.size() - 1 - i])
      throw std::invalid_argument("exprref: " + shape_text(t.shape) + " cannot be assigned to " +
                                  shape_text(shape));
  }
  Tensor r = make(shape);
  for_each_index(shape, {broadcast_strides(t.shape, shape)},
                 [&](std::int64_t i, const std::vector<std::int64_t>& off) {
                   const auto o = static_cast<std::size_t>(off[0]);
                   r.v[i] = t.v[o];
                   r.mag[i] = t.mag[o];
                   r.unstable[i] = t.unstable[o];
                 });
  return r;
}

// ---- elementwise -----------------------------------------------------------------------------

Tensor operator+(const Tensor& a, const Tensor& b) {
  return binary(a, b, [](Elem x, Elem y) {
    const double r = x.v + y.v;
    return Result{r, x.m + y.m + rounding(r, x.m == 0 && y.m == 0, true)};
  });
}

Tensor operator-(const Tensor& a, const Tensor& b) {
  return binary(a, b, [](Elem x, Elem y) {
    const double r = x.v - y.v;
    return Result{r, x.m + y.m + rounding(r, x.m == 0 && y.m == 0, true)};
  });
}

Tensor operator*(const Tensor& a, const Tensor& b) {
  return binary(a, b, [](Elem x, Elem y) {
    const double r = x.v * y.v;
    return Result{
        r, weighted(y.v, x.m) + weighted(x.v, y.m) + rounding(r, x.m == 0 && y.m == 0, true)};
  });
}

// Division is only trusted to be exact by a power of two: fast device division (a * rcp(b)) is
// not correctly rounded otherwise.
Tensor operator/(const Tensor& a, const Tensor& b) {
  return binary(a, b, [](Elem x, Elem y) {
    const double r = x.v / y.v;
    return Result{r, weighted(1.0 / y.v, x.m) + weighted(x.v / (y.v * y.v), y.m) +
                         rounding(r, x.m == 0 && y.m == 0, is_pow2(std::fabs(y.v)))};
  });
}

Tensor operator-(const Tensor& a) {
  return unary(a, [](Elem x) { return Result{-x.v, x.m}; });
}

Tensor neg(const Tensor& a) {
  return -a;
}

Tensor abs(const Tensor& a) {
  return unary(a, [](Elem x) { return Result{std::fabs(x.v), x.m}; });
}

Tensor sqr(const Tensor& a) {
  return unary(a, [](Elem x) {
    const double r = x.v * x.v;
    return Result{r, weighted(2 * x.v, x.m) + rounding(r, x.m == 0, true)};
  });
}

Tensor pow(const Tensor& a, const Tensor& b) {
  return binary(a, b, [](Elem x, Elem y) {
    const double r = std::pow(x.v, y.v);
    const double da = y.v * std::pow(x.v, y.v - 1);
    const double db = x.v > 0 ? r * std::log(x.v) : 0.0;
    return Result{r, weighted(da, x.m) + weighted(db, y.m) + rounding(r, false, false)};
  });
}

Tensor eq(const Tensor& a, const Tensor& b) {
  return compare(a, b, [](double x, double y) { return x == y; });
}
Tensor ne(const Tensor& a, const Tensor& b) {
  return compare(a, b, [](double x, double y) { return x != y; });
}
Tensor lt(const Tensor& a, const Tensor& b) {
  return compare(a, b, [](double x, double y) { return x < y; });
}
Tensor le(const Tensor& a, const Tensor& b) {
  return compare(a, b, [](double x, double y) { return x <= y; });
}
Tensor gt(const Tensor& a, const Tensor& b) {
  return compare(a, b, [](double x, double y) { return x > y; });
}
Tensor ge(const Tensor& a, const Tensor& b) {
  return compare(a, b, [](double x, double y) { return x >= y; });
}
Tensor operator<(const Tensor& a, const Tensor& b) {
  return lt(a, b);
}
Tensor operator<=(const Tensor& a, const Tensor& b) {
  return le(a, b);
}
Tensor operator>(const Tensor& a, const Tensor& b) {
  return gt(a, b);
}
Tensor operator>=(const Tensor& a, const Tensor& b) {
  return ge(a, b);
}

Tensor sqrt(const Tensor& a) {
  return smooth(
      a, [](double x) { return std::sqrt(x); }, [](double, double r) { return 0.5 / r; });
}
Tensor exp(const Tensor& a) {
  return smooth(
      a, [](double x) { return std::exp(x); }, [](double, double r) { return r; });
}
Tensor exp2(const Tensor& a) {
  return smooth(
      a, [](double x) { return std::exp2(x); }, [](double, double r) { return kLn2 * r; });
}
Tensor log(const Tensor& a) {
  return smooth(
      a, [](double x) { return std::log(x); }, [](double x, double) { return 1.0 / x; });
}
Tensor log2(const Tensor& a) {
  return smooth(
      a, [](double x) { return std::log2(x); }, [](double x, double) { return 1.0 / (x * kLn2); });
}
Tensor sig(const Tensor& a) {
  return smooth(a, sig_value, [](double, double s) { return s * (1 - s); });
}
Tensor sig2(const Tensor& a) {
  return smooth(
      a, [](double x) { return sig_value(x * kLn2); },
      [](double, double s) { return kLn2 * s * (1 - s); });
}
Tensor tanh(const Tensor& a) {
  return smooth(
      a, [](double x) { return std::tanh(x); }, [](double, double t) { return 1 - t * t; });
}
Tensor tanh2(const Tensor& a) {
  return smooth(
      a, [](double x) { return std::tanh(x * kLn2); },
      [](double, double t) { return kLn2 * (1 - t * t); });
}

// NaN propagates, as NumPy's maximum/minimum do. Choosing an operand rounds nothing.
Tensor maximum(const Tensor& a, const Tensor& b) {
  return binary(a, b, [](Elem x, Elem y) {
    if (std::isnan(x.v) || std::isnan(y.v)) return Result{kNaN, 0.0};
    const Elem& pick = x.v >= y.v ? x : y;
    return Result{pick.v, near_jump(x.v - y.v, x.m + y.m) ? std::max(x.m, y.m) : pick.m};
  });
}

Tensor minimum(const Tensor& a, const Tensor& b) {
  return binary(a, b, [](Elem x, Elem y) {
    if (std::isnan(x.v) || std::isnan(y.v)) return Result{kNaN, 0.0};
    const Elem& pick = x.v <= y.v ? x : y;
    return Result{pick.v, near_jump(x.v - y.v, x.m + y.m) ? std::max(x.m, y.m) : pick.m};
  });
}

// NumPy: clip(x, lo, hi) = minimum(maximum(x, lo), hi).
Tensor clip(const Tensor& a, const Tensor& lo, const Tensor& hi) {
  return minimum(maximum(a, lo), hi);
}

Tensor reciprocal(const Tensor& a) {
  return unary(a, [](Elem x) {
    const double r = 1.0 / x.v;
    return Result{r, weighted(r * r, x.m) + rounding(r, x.m == 0, is_pow2(std::fabs(x.v)))};
  });
}

// condition != 0 selects a (NaN != 0, so a NaN condition selects a). Only the chosen operand's
// error and stability matter.
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  Shape shape = broadcast_shapes(broadcast_shapes(condition.shape, a.shape), b.shape);
  Tensor c = broadcast_to(condition, shape), x = broadcast_to(a, shape), y = broadcast_to(b, shape);
  Tensor r = make(shape);
  for (std::size_t i = 0; i < r.v.size(); ++i) {
    const bool take_a = c.v[i] != 0;
    const Tensor& pick = take_a ? x : y;
    r.v[i] = pick.v[i];
    r.mag[i] = pick.mag[i];
    r.unstable[i] = c.unstable[i] || pick.unstable[i] || near_jump(c.v[i], c.mag[i]);
  }
  return r;
}

Tensor floor(const Tensor& a) {
  return unary(a, [](Elem x) {
    return Result{std::floor(x.v), 0.0, near_jump(x.v - std::nearbyint(x.v), x.m)};
  });
}

Tensor ceil(const Tensor& a) {
  return unary(a, [](Elem x) {
    return Result{std::ceil(x.v), 0.0, near_jump(x.v - std::nearbyint(x.v), x.m)};
  });
}

Tensor sign(const Tensor& a) {
  return unary(a, [](Elem x) {
    const double r = std::isnan(x.v) ? kNaN : (x.v > 0 ? 1.0 : (x.v < 0 ? -1.0 : 0.0));
    return Result{r, 0.0, near_jump(x.v, x.m)};
  });
}

// ---- reductions ------------------------------------------------------------------------------

namespace {

Result mean_items(const std::vector<Elem>& items) {
  Result s = sum_items(items);
  const double n = static_cast<double>(items.size());
  const double r = s.v / n;
  const bool exact = s.m == 0 && is_pow2(n);
  // Either sum / n or sum * (1 / n): up to two roundings.
  return {r, s.m / n + (exact ? 0.0 : 2 * rounding(r, false, false))};
}

}  // namespace

Tensor sum(const Tensor& a, int axis) {
  return reduce(a, one_axis(a, axis, "sum"), "sum",
                [](const std::vector<Elem>& e, bool) { return sum_items(e); });
}
Tensor max(const Tensor& a, int axis) {
  return reduce(a, one_axis(a, axis, "max"), "max",
                [](const std::vector<Elem>& e, bool) { return extreme_items(e, true); });
}
Tensor min(const Tensor& a, int axis) {
  return reduce(a, one_axis(a, axis, "min"), "min",
                [](const std::vector<Elem>& e, bool) { return extreme_items(e, false); });
}
Tensor mean(const Tensor& a, int axis) {
  return reduce(a, one_axis(a, axis, "mean"), "mean",
                [](const std::vector<Elem>& e, bool) { return mean_items(e); });
}
Tensor argmax(const Tensor& a, int axis) {
  return reduce(a, one_axis(a, axis, "argmax"), "argmax",
                [](const std::vector<Elem>& e, bool) { return arg_items(e, true); });
}
Tensor argmin(const Tensor& a, int axis) {
  return reduce(a, one_axis(a, axis, "argmin"), "argmin",
                [](const std::vector<Elem>& e, bool) { return arg_items(e, false); });
}
Tensor sum(const Tensor& a) {
  return reduce(a, all_axes(a), "sum",
                [](const std::vector<Elem>& e, bool) { return sum_items(e); });
}
Tensor max(const Tensor& a) {
  return reduce(a, all_axes(a), "max",
                [](const std::vector<Elem>& e, bool) { return extreme_items(e, true); });
}
Tensor min(const Tensor& a) {
  return reduce(a, all_axes(a), "min",
                [](const std::vector<Elem>& e, bool) { return extreme_items(e, false); });
}
Tensor mean(const Tensor& a) {
  return reduce(a, all_axes(a), "mean",
                [](const std::vector<Elem>& e, bool) { return mean_items(e); });
}
Tensor argmax(const Tensor& a) {
  return reduce(a, all_axes(a), "argmax",
                [](const std::vector<Elem>& e, bool) { return arg_items(e, true); });
}
Tensor argmin(const Tensor& a) {
  return reduce(a, all_axes(a), "argmin",
                [](const std::vector<Elem>& e, bool) { return arg_items(e, false); });
}

// ---- output conversions ----------------------------------------------------------------------

double round_to_bf16(float x) {
  if (std::isnan(x)) return kNaN;
  std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  bits += 0x7fffu + ((bits >> 16) & 1u);  // half to even on the 16 dropped bits
  bits &= 0xffff0000u;
  return static_cast<double>(std::bit_cast<float>(bits));
}

double convert_to_u8(float x) {
  if (std::isnan(x)) return 0.0;
  return std::clamp(std::trunc(static_cast<double>(x)), 0.0, 255.0);
}

double convert_to_i32(float x) {
  if (std::isnan(x)) return 0.0;
  return std::clamp(std::trunc(static_cast<double>(x)), -2147483648.0, 2147483647.0);
}

const char* form_name(Form form) {
  switch (form) {
    case Form::assign_fn:
      return "assign(out, e)";
    case Form::assign_op:
      return "out = e";
    case Form::index_op:
      return "out.index(...) = e";
    case Form::plus_eq:
      return "out += e";
    case Form::minus_eq:
      return "out -= e";
    case Form::times_eq:
      return "out *= e";
    case Form::div_eq:
      return "out /= e";
    case Form::evaluate:
      return "evaluate(e, dtype)";
  }
  return "?";
}

// ---- comparing outputs -----------------------------------------------------------------------

namespace {

double element_tolerance(const Tensor& t, std::size_t i, Tolerance tol) {
  return t.mag[i] > 0 ? tol.rtol * t.mag[i] + tol.atol : 0.0;
}

flexkit::portable::Flex16Code encode(double x, int iwl) {
  return flexkit::portable::flex16_encode(to_f32(x), iwl);
}

std::string index_text(const Shape& shape, std::int64_t linear) {
  std::vector<std::int64_t> idx(shape.size());
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    idx[d] = shape[d] ? linear % shape[d] : 0;
    linear = shape[d] ? linear / shape[d] : 0;
  }
  std::ostringstream s;
  s << "[";
  for (std::size_t d = 0; d < idx.size(); ++d) s << (d ? ", " : "") << idx[d];
  s << "]";
  return s.str();
}

}  // namespace

Flex16Expectation expect_flex16_stats(const Tensor& expected, int iwl, Tolerance tol) {
  Flex16Expectation e;
  for (std::size_t i = 0; i < expected.v.size(); ++i) {
    const double v = expected.v[i];
    if (std::isnan(v)) {
      ++e.nan_count;
      continue;
    }
    if (expected.unstable[i]) {
      ++e.saturated_max;
      continue;
    }
    const double t = element_tolerance(expected, i, tol);
    const bool mid = encode(v, iwl).saturated;
    const bool lo = encode(v - t, iwl).saturated, hi = encode(v + t, iwl).saturated;
    // Inexact elements may also land one LSB off, which can be the saturating one.
    const bool edge = t > 0 && std::abs(encode(v, iwl).m) >= flexkit::portable::kFlex16MaxM - 1;
    if (mid && lo && hi) ++e.saturated_min;
    if (mid || lo || hi || edge) ++e.saturated_max;
  }
  return e;
}

std::pair<int, int> exact_policy_iwl_range(const Tensor& expected, Tolerance tol) {
  double lo = 0, hi = 0;
  for (std::size_t i = 0; i < expected.v.size(); ++i) {
    const double v = expected.v[i];
    if (std::isnan(v) || expected.unstable[i]) continue;
    const double t = element_tolerance(expected, i, tol);
    lo = std::max(lo, std::fabs(v) - t);
    hi = std::max(hi, std::fabs(v) + t);
  }
  return {flexkit::portable::flex16_iwl_for_max(to_f32(lo)),
          flexkit::portable::flex16_iwl_for_max(to_f32(hi))};
}

::testing::AssertionResult output_matches(const flexkit::Array& out, const Tensor& expected,
                                          Tolerance tol, CheckReport* report) {
  using flexkit::DType;
  if (out.shape() != expected.shape)
    return ::testing::AssertionFailure() << "output shape " << shape_text(out.shape())
                                         << " != reference shape " << shape_text(expected.shape);
  const DType dtype = out.dtype();
  std::vector<double> got;
  std::vector<std::int16_t> mantissas;
  int iwl = 0;
  if (dtype == DType::flex16) {
    mantissas = out.to_vector<std::int16_t>();
    iwl = out.iwl();
  } else {
    got = out.to_doubles();
  }
  CheckReport local;
  std::int64_t bad = 0;
  std::ostringstream msg;
  msg << out.describe() << " vs reference (rtol " << tol.rtol << ", atol " << tol.atol;
  if (dtype == DType::flex16) msg << ", iwl " << iwl;
  msg << "):";
  auto convert = [&](double x) -> double {
    const float f = to_f32(x);
    switch (dtype) {
      case DType::bf16:
        return round_to_bf16(f);
      case DType::u8:
        return convert_to_u8(f);
      case DType::i32:
        return convert_to_i32(f);
      default:
        return static_cast<double>(f);
    }
  };
  for (std::size_t i = 0; i < expected.v.size(); ++i) {
    if (expected.unstable[i]) {
      ++local.unstable;
      continue;
    }
    ++local.checked;
    const double v = expected.v[i];
    const double t = element_tolerance(expected, i, tol);
    bool ok = false;
    std::ostringstream detail;
    if (dtype == DType::flex16) {
      const int m = mantissas[i];
      const int want = encode(v, iwl).m;
      if (t == 0 || std::isnan(v)) {
        ok = m == want;
      } else {
        const int lo = encode(v - t, iwl).m, hi = encode(v + t, iwl).m;
        ok = std::abs(m - want) <= 1 || (m >= lo && m <= hi);
      }
      detail << "m " << m << " (" << m * std::ldexp(1.0, iwl - 15) << "), reference m " << want;
    } else if (dtype == DType::f32 || dtype == DType::f64) {
      const double g = got[i];
      if (std::isnan(v)) {
        ok = std::isnan(g);
      } else if (std::isinf(v)) {
        ok = g == v;
      } else if (t == 0) {
        ok = g == convert(v);
      } else if (std::isinf(g)) {
        ok = (g > 0) == (v > 0) && std::fabs(v) + t >= FLT_MAX;
      } else {
        ok = std::fabs(g - v) <= t;
      }
      detail << "got " << g << ", |err| " << std::fabs(g - v) << " > tol " << t;
    } else {
      const double g = got[i];
      if (std::isnan(v) || t == 0) {
        const double want = convert(v);
        ok = g == want || (std::isnan(g) && std::isnan(want));
        detail << "got " << g << ", want " << want;
      } else {
        const double lo = convert(v - t), hi = convert(v + t);
        ok = g >= lo && g <= hi;
        detail << "got " << g << ", want within [" << lo << ", " << hi << "]";
      }
    }
    if (!ok) {
      if (++bad <= 8)
        msg << "\n  at " << index_text(out.shape(), static_cast<std::int64_t>(i)) << ": reference "
            << v << " (error scale " << expected.mag[i] << "), " << detail.str();
    }
  }
  if (report) *report = local;
  if (bad) {
    if (bad > 8) msg << "\n  ... " << bad - 8 << " more";
    msg << "\n  " << bad << " of " << local.checked << " compared elements differ";
    return ::testing::AssertionFailure() << msg.str();
  }
  return ::testing::AssertionSuccess();
}

}  // namespace exprref
