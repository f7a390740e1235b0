// Matrix products: out = alpha · A · B + beta · out, batched over a leading axis.
//
// Types: f32 × f32 → f32; flex16 × flex16 → flex16 or f32; flex16 × u8 and u8 × flex16 (weights
// × spikes) → flex16 or f32. Integer products are exact: mantissa products are summed exactly and
// each output is rounded once (docs/flex16.md), so the result is bit-identical on every backend.
// Transposes come from the views' strides: dot(A.T(), B, out) multiplies by Aᵀ without a copy.
#pragma once
#include <optional>
#include <string>

#include "flexkit/array.hpp"
#include "flexkit/expr.hpp"
#include "flexkit/heavy_op_options.hpp"

namespace flexkit {

// A (m, k) or (batch, m, k); B (k, n) or (batch, k, n); out (m, n) or (batch, m, n). A 2-d
// operand beside a 3-d one is shared by every batch entry. Throws ShapeError (inner or outer
// dimensions that do not match), DTypeError (unsupported combination), DeviceError (operands on
// different devices), ValueError (out overlapping an input, or out a broadcast view). Nothing is
// written when it throws.
void dot(const Array& a, const Array& b, const Array& out, const DotOptions& options = {});
inline void dot(const Array& a, const Array& b, const Array& out, double alpha, double beta = 0.0) {
  DotOptions options;
  options.alpha = alpha;
  options.beta = beta;
  dot(a, b, out, options);
}

// The kernel dot(a, b, out, options) runs, by its stable name ("cpu.avx2", "cuda.planar", …; the
// list is in docs/kernels.md), without running it: the arguments are checked as dot() checks them
// (and throw alike), and the plan of the call's problem class is made now when it is new (so
// FLEXKIT_LOG=1 prints it) and kept for the call. "none" when there is nothing to multiply (an
// empty output or inner dimension). Under IwlPolicy::exact the name is the storing pass's at the
// output's current exponent.
std::string dot_kernel_name(const Array& a, const Array& b, const Array& out,
                            const DotOptions& options = {});

// A new array holding a · b: f32 for f32 inputs, flex16 (exact policy) for integer products
// unless `out_dtype` says f32.
Array dot(const Array& a, const Array& b, std::optional<DType> out_dtype = std::nullopt);

}  // namespace flexkit
