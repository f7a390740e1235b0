// An independent float64 model of the fused expressions of flexkit/expr.hpp, for differential
// tests. Tensors are eager (every op computes its result at once), follow NumPy broadcasting and
// carry the same op names as flexkit::Expr, so one generic formula written against both types
// builds the library's tree and the reference value from the same code.
//
// Beside every value the model carries a first-order forward error bound of a float32
// evaluation of the same tree, so each case can state a tolerance in ulps-like units instead of
// hand-tuning absolute bounds:
//   - mag: a float32 evaluation differs from `v` by at most about rtol * mag (+ atol for the
//     approximated functions). mag == 0 means every intermediate was exactly representable in
//     float32 under a correctly rounded op, so any correct evaluation reproduces `v` bit for bit.
//   - unstable: the element went through a discontinuous op (comparison, floor, sign, argmax, ...)
//     whose input lies so close to the jump that float32 rounding may flip it; such elements are
//     not checked.
//
// The second part compares what a flexkit output array holds with a reference tensor, for every
// output dtype (f32, bf16, flex16, u8, i32), with the conversion rules of docs/flex16.md and
// expr.hpp.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "flexkit/array.hpp"
#include "flexkit/expr.hpp"

namespace exprref {

using Shape = std::vector<std::int64_t>;

// How close (relative to mag, plus an absolute floor) an inexact input must be to a jump of a
// discontinuous op for its result to be called unstable. Larger than any tolerance a case uses.
inline constexpr double kUnstableRel = 1e-4;
inline constexpr double kUnstableAbs = 1e-5;

struct Tensor {
  Shape shape;
  std::vector<double> v;
  std::vector<double> mag;
  std::vector<unsigned char> unstable;

  Tensor() = default;
  // A rank-0 scalar, as flexkit::Expr(double): the library rounds it to float32 once.
  Tensor(double scalar);                                       // NOLINT
  Tensor(int scalar) : Tensor(static_cast<double>(scalar)) {}  // NOLINT
  // A leaf read from an array: exact values (every input dtype converts to float32 exactly).
  static Tensor leaf(Shape shape, std::vector<double> values);

  std::int64_t size() const { return static_cast<std::int64_t>(v.size()); }
};

std::int64_t numel(const Shape& shape);
std::string shape_text(const Shape& shape);
// NumPy broadcasting of two shapes; std::invalid_argument when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b);
// The tensor repeated to `shape` as an assignment `out[...] = t` does in NumPy: t's shape must
// broadcast to `shape`, and leading size-1 axes of t beyond out's rank are dropped.
Tensor broadcast_to(const Tensor& t, const Shape& shape);

// ---- elementwise ---------------------------------------------------------------------------
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor abs(const Tensor& a);
Tensor neg(const Tensor& a);
Tensor sqr(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor exp2(const Tensor& a);
Tensor log(const Tensor& a);
Tensor log2(const Tensor& a);
Tensor sig(const Tensor& a);
Tensor sig2(const Tensor& a);
Tensor tanh(const Tensor& a);
Tensor tanh2(const Tensor& a);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor clip(const Tensor& a, const Tensor& lo, const Tensor& hi);
Tensor reciprocal(const Tensor& a);
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
Tensor floor(const Tensor& a);
Tensor ceil(const Tensor& a);
Tensor sign(const Tensor& a);

// ---- reductions (axis kept with size 1; the all-axes forms keep every axis with size 1) -----
// A negative axis counts from the end; std::out_of_range for an axis outside the rank and
// std::invalid_argument for a reduction over an empty axis.
Tensor sum(const Tensor& a, int axis);
Tensor max(const Tensor& a, int axis);
Tensor min(const Tensor& a, int axis);
Tensor mean(const Tensor& a, int axis);
Tensor argmax(const Tensor& a, int axis);
Tensor argmin(const Tensor& a, int axis);
Tensor sum(const Tensor& a);
Tensor max(const Tensor& a);
Tensor min(const Tensor& a);
Tensor mean(const Tensor& a);
Tensor argmax(const Tensor& a);  // row-major flat index
Tensor argmin(const Tensor& a);

// ---- output conversions, written from the spec ------------------------------------------------
// bfloat16 round-to-nearest-even of a float32 value (NaN stays NaN), returned as its value.
double round_to_bf16(float x);
// float32 -> u8 / i32: toward zero, saturated to the type's range, NaN -> 0.
double convert_to_u8(float x);
double convert_to_i32(float x);

// ---- comparing a flexkit output with the reference --------------------------------------------
// A case's tolerance: |got - v| <= rtol * mag + atol for inexact elements (see Tensor).
struct Tolerance {
  double rtol = 2e-6;
  double atol = 0.0;
};

// What a flex16 write of `expected` at `iwl` must record, as a range where float32 rounding
// near the saturation threshold leaves the count open.
struct Flex16Expectation {
  std::uint64_t saturated_min = 0;
  std::uint64_t saturated_max = 0;
  std::uint64_t nan_count = 0;
};
Flex16Expectation expect_flex16_stats(const Tensor& expected, int iwl, Tolerance tol);

// The iwl range IwlPolicy::exact may pick for `expected`: flex16_iwl_for_max of the float32
// result's max |value|, for any float32 result within tolerance.
std::pair<int, int> exact_policy_iwl_range(const Tensor& expected, Tolerance tol);

struct CheckReport {
  std::int64_t checked = 0;   // elements compared
  std::int64_t unstable = 0;  // elements skipped as unstable
};

// Compares every element `out` views (row-major order) with `expected`, which must already have
// out's shape. f32: bit-exact where mag == 0, else within tolerance. bf16, u8, i32: the output's
// conversion of some float32 value within tolerance (bit-exact where mag == 0). flex16 at
// out.iwl(): the reference codec's mantissa where mag == 0, else within one LSB of it.
// `report` (optional) receives how many elements were compared.
::testing::AssertionResult output_matches(const flexkit::Array& out, const Tensor& expected,
                                          Tolerance tol, CheckReport* report = nullptr);

// ---- assignment forms ----------------------------------------------------------------------
// include/flexkit/expr.hpp promises `out = e`, `out[view] = e`, `+=` and friends, and a function
// that returns a new array, besides flexkit::assign. They are detected at compile time, and a
// static_assert below requires every one of them.
enum class Form { assign_fn, assign_op, index_op, plus_eq, minus_eq, times_eq, div_eq, evaluate };

const char* form_name(Form form);

template <class A, class E>
concept HasAssignOp = requires(A& a, const E& e) {
  a = e;
};
template <class A, class E>
concept HasRvalueAssignOp = requires(A&& a, const E& e) {
  static_cast<A&&>(a) = e;
};
template <class A, class E>
concept HasPlusEq = requires(A& a, const E& e) {
  a += e;
};
template <class A, class E>
concept HasMinusEq = requires(A& a, const E& e) {
  a -= e;
};
template <class A, class E>
concept HasTimesEq = requires(A& a, const E& e) {
  a *= e;
};
template <class A, class E>
concept HasDivEq = requires(A& a, const E& e) {
  a /= e;
};
template <class E>
concept HasEvaluate = requires(const E& e) {
  evaluate(e, flexkit::DType::f32);
};

// Runs `form` writing `e` into `out`; for Form::index_op the write goes through
// base.index(index_text) (out.index("...") when index_text is empty), which must be the view
// `out` is. Returns false, writing nothing, when the public header does not declare the form.
template <class A = flexkit::Array, class E = flexkit::Expr>
bool run_form(Form form, const A& out, const E& e, const flexkit::AssignOptions& options = {},
              const A* base = nullptr, std::string_view index_text = {}) {
  A target = out;
  switch (form) {
    case Form::assign_fn:
      flexkit::assign(out, e, options);
      return true;
    case Form::assign_op:
      if constexpr (HasAssignOp<A, E>) {
        target = e;
        return true;
      }
      return false;
    case Form::index_op:
      if constexpr (HasRvalueAssignOp<A, E>) {
        if (base && !index_text.empty())
          base->index(index_text) = e;
        else
          out.index("...") = e;
        return true;
      }
      return false;
    case Form::plus_eq:
      if constexpr (HasPlusEq<A, E>) {
        target += e;
        return true;
      }
      return false;
    case Form::minus_eq:
      if constexpr (HasMinusEq<A, E>) {
        target -= e;
        return true;
      }
      return false;
    case Form::times_eq:
      if constexpr (HasTimesEq<A, E>) {
        target *= e;
        return true;
      }
      return false;
    case Form::div_eq:
      if constexpr (HasDivEq<A, E>) {
        target /= e;
        return true;
      }
      return false;
    case Form::evaluate:
      return false;
  }
  return false;
}

// evaluate(e, dtype), or nothing when the public header does not declare it.
template <class E = flexkit::Expr>
std::optional<flexkit::Array> run_evaluate(const E& e, flexkit::DType dtype) {
  if constexpr (HasEvaluate<E>) {
    return flexkit::Array(evaluate(e, dtype));
  } else {
    (void)e;
    (void)dtype;
    return std::nullopt;
  }
}

// Whether the public header declares `form` (for messages and skips).
template <class A = flexkit::Array, class E = flexkit::Expr>
constexpr bool form_declared(Form form) {
  switch (form) {
    case Form::assign_fn:
      return true;
    case Form::assign_op:
      return HasAssignOp<A, E>;
    case Form::index_op:
      return HasRvalueAssignOp<A, E>;
    case Form::plus_eq:
      return HasPlusEq<A, E>;
    case Form::minus_eq:
      return HasMinusEq<A, E>;
    case Form::times_eq:
      return HasTimesEq<A, E>;
    case Form::div_eq:
      return HasDivEq<A, E>;
    case Form::evaluate:
      return HasEvaluate<E>;
  }
  return false;
}

// include/flexkit/expr.hpp declares every form: one that goes missing fails the build here
// instead of turning its tests into skips.
static_assert(form_declared(Form::assign_op) && form_declared(Form::index_op) &&
                  form_declared(Form::plus_eq) && form_declared(Form::minus_eq) &&
                  form_declared(Form::times_eq) && form_declared(Form::div_eq) &&
                  form_declared(Form::evaluate),
              "include/flexkit/expr.hpp no longer declares an assignment form the tests cover");

}  // namespace exprref
