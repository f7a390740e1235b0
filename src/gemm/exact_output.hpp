// What every exact product (dot, convolution) shares on the host side: how the output's epilogue
// is made from the operands' exponents, how the `exact` iwl policy turns a measuring pass into an
// exponent, how the result's exponent and statistics are recorded, and the aliasing checks that
// keep an output from overwriting what the product still reads.
#pragma once
#include <cstdint>

#include "backend/exact_stats.hpp"
#include "backend/gemm_problem.hpp"
#include "flexkit/array.hpp"
#include "flexkit/portable/gemm_epilogue.hpp"

namespace flexkit::gemm {

// The element kind the backends see for an operand or output of `dtype` (f32, flex16, and u8 for
// the byte dtypes).
ElementKind kind_of(DType dtype);

// The exponent an operand of an integer product contributes: a u8 byte counts as a mantissa at
// iwl 15 (value = byte).
int operand_iwl(const Array& x);

// Everything about an integer product's output except the exponent it is stored at.
struct ExactOutput {
  int iwl_ab = 0;         // operand_iwl(A) + operand_iwl(B)
  bool flex_out = false;  // flex16 output (else f32)
  int old_iwl = 0;        // a flex16 output's exponent before the call (for beta ≠ 0)
  double alpha = 1.0;
  double beta = 0.0;
};

ExactOutput exact_output(const Array& a, const Array& b, const Array& out, double alpha,
                         double beta);

// The epilogue that stores at `out_iwl` (ignored for an f32 output).
portable::GemmEpilogue make_epilogue(const ExactOutput& o, int out_iwl);

// The smallest iwl at which a measured range (EpilogueMode::measure statistics) stores without
// saturating; 0 when every value is 0, as flex16_choose_iwl does.
int exact_iwl(const portable::GemmStats& measured, const ExactOutput& o);

// Records a finished flex16 write: the output storage's exponent and its statistics.
void record_flex16_result(const Array& out, int out_iwl, const ExactStats& stats);

// Whether `out` and `in` can share a byte (views of one storage whose element spans meet).
bool overlaps(const Array& out, const Array& in);

// True when two different index tuples of `x` can name the same element (a broadcast view, or
// strides that interleave).
bool self_overlapping(const Array& x);

}  // namespace flexkit::gemm
