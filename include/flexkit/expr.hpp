// Fused expressions: operators and functions on arrays and scalars build a lazy tree; nothing
// runs until the tree is assigned to an array, and then the whole assignment runs as one
// generated kernel (two when a reduction feeds a broadcast, e.g. A - max(A, 1)).
//
//   Array out = Array::empty({n}, DType::f32, gpu);
//   out = sig(a * b + c) * d - e;                  // one kernel
//   out.index("::2") += 2.5;                       // scalars are parameters, never recompiled
//   assign(p, exp(x - max(x, 1)) / sum(exp(x - max(x, 1)), 1));   // softmax over rows
//
// Computation is in float32 whatever the input dtypes (f32, bf16, flex16, u8, i32); the output
// dtype is the output array's. Broadcasting follows NumPy for any rank; inputs may be any view
// and may alias the output.
#pragma once
#include <memory>
#include <optional>

#include "flexkit/array.hpp"
#include "flexkit/flex16.hpp"

namespace flexkit {

namespace ir {
struct Node;
}

// A node of an expression tree. Arrays and numbers convert to leaves implicitly.
class Expr {
 public:
  Expr(const Array& array);  // NOLINT(google-explicit-constructor): a leaf reading the array
  Expr(double value);        // NOLINT(google-explicit-constructor): a scalar parameter
  Expr(int value) : Expr(static_cast<double>(value)) {}  // NOLINT
  explicit Expr(std::shared_ptr<const ir::Node> node) : node_(std::move(node)) {}

  // The broadcast shape the tree evaluates to.
  const Shape& shape() const;
  const std::shared_ptr<const ir::Node>& node() const { return node_; }

 private:
  std::shared_ptr<const ir::Node> node_;
};

// ---- elementwise -------------------------------------------------------------------------
Expr operator+(const Expr& a, const Expr& b);
Expr operator-(const Expr& a, const Expr& b);
Expr operator*(const Expr& a, const Expr& b);
Expr operator/(const Expr& a, const Expr& b);
Expr operator-(const Expr& a);
Expr pow(const Expr& a, const Expr& b);
// Comparisons give 1.0 or 0.0.
Expr eq(const Expr& a, const Expr& b);
Expr ne(const Expr& a, const Expr& b);
Expr lt(const Expr& a, const Expr& b);
Expr le(const Expr& a, const Expr& b);
Expr gt(const Expr& a, const Expr& b);
Expr ge(const Expr& a, const Expr& b);
Expr operator<(const Expr& a, const Expr& b);
Expr operator<=(const Expr& a, const Expr& b);
Expr operator>(const Expr& a, const Expr& b);
Expr operator>=(const Expr& a, const Expr& b);
Expr abs(const Expr& a);
Expr neg(const Expr& a);
Expr sqr(const Expr& a);
Expr sqrt(const Expr& a);
Expr exp(const Expr& a);
Expr exp2(const Expr& a);
Expr log(const Expr& a);
Expr log2(const Expr& a);
Expr sig(const Expr& a);    // 1 / (1 + e^-x)
Expr sig2(const Expr& a);   // 1 / (1 + 2^-x)
Expr tanh(const Expr& a);   // stable: ±1 for large |x|, never NaN
Expr tanh2(const Expr& a);  // tanh(x · ln 2)
Expr maximum(const Expr& a, const Expr& b);
Expr minimum(const Expr& a, const Expr& b);
Expr clip(const Expr& a, const Expr& lo, const Expr& hi);
Expr reciprocal(const Expr& a);
Expr where(const Expr& condition, const Expr& a, const Expr& b);  // condition != 0 ? a : b
Expr floor(const Expr& a);
Expr ceil(const Expr& a);
Expr sign(const Expr& a);

// ---- reductions: over one axis (kept with size 1) or over every axis (all kept, size 1) ----
// A reduction over an empty axis throws ShapeError; argmax/argmin ties go to the lowest index
// and give the index as a number.
Expr sum(const Expr& a, int axis);
Expr max(const Expr& a, int axis);
Expr min(const Expr& a, int axis);
Expr mean(const Expr& a, int axis);
Expr argmax(const Expr& a, int axis);
Expr argmin(const Expr& a, int axis);
Expr sum(const Expr& a);
Expr max(const Expr& a);
Expr min(const Expr& a);
Expr mean(const Expr& a);
Expr argmax(const Expr& a);  // index into the row-major flattening
Expr argmin(const Expr& a);

// ---- assignment ------------------------------------------------------------------------------
// How a flex16 output picks its exponent.
enum class IwlPolicy {
  fixed,  // the output array's iwl (or AssignOptions::iwl): values beyond its range saturate
  exact,  // the smallest iwl that holds the rounded result (a max pass first): nothing saturates
  // predicted by the output's Autoflex manager from the history of its writes (autoflex.hpp):
  // the first write is `exact`, later ones store at the predicted iwl in one pass
  autoflex,
};

struct AssignOptions {
  IwlPolicy iwl_policy = IwlPolicy::fixed;
  std::optional<int> iwl;  // with `fixed`: set the output's iwl to this first
  // How a flex16 output rounds: to nearest (even), or stochastically — the element at offset k
  // from the output view's first element rounds up with probability equal to the fraction
  // dropped, drawn from (seed, k), so one seed gives the same bits on every backend. A caller
  // that writes a tensor repeatedly passes a new seed each time (e.g. one per step).
  Rounding rounding = Rounding::nearest_even;
  std::uint64_t seed = 0;
};

// Evaluates `e` into every element `out` views (the tree's shape must broadcast to out's shape;
// leading size-1 axes of the tree may be dropped, as in NumPy). Throws ShapeError, DTypeError,
// DeviceError (operands on another device than out), CompileError (CUDA code generation).
// Nothing is written if the call throws before the kernel runs.
void assign(const Array& out, const Expr& e, const AssignOptions& options = {});

// Evaluates `e` into a new contiguous array of e's shape, on the device of its operands (cpu
// when it has none). flex16 results use the exact policy.
Array evaluate(const Expr& e, DType dtype = DType::f32);

}  // namespace flexkit
