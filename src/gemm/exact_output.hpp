// What every exact product (dot, convolution) shares on the host side: how the output's epilogue
// is made from the operands' exponents, how the `exact` iwl policy turns a measuring pass into an
// exponent, how the result's exponent and statistics are recorded, and the aliasing checks that
// keep an output from overwriting what the product still reads.
#pragma once
#include <cstdint>
#include <memory>

#include "flexkit/array.hpp"
#include "flexkit/portable/gemm_epilogue.hpp"

namespace flexkit::detail {
class PendingFlex16Stats;
}

namespace flexkit::gemm {

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

// The statistics of an integer product: `value` when known on return (the CPU, a measuring pass),
// otherwise `pending`, which a device fills and the output's first statistics read waits for
// (so a caller that never reads them never waits).
struct ExactStats {
  portable::GemmStats value = portable::gemm_stats_identity();
  std::shared_ptr<detail::PendingFlex16Stats> pending;
};
inline ExactStats known_stats(const portable::GemmStats& value) {
  return {value, nullptr};
}

// Records a finished flex16 write: the output storage's exponent and its statistics.
void record_flex16_result(const Array& out, int out_iwl, const ExactStats& stats);

// Whether `out` and `in` can share a byte (views of one storage whose element spans meet).
bool overlaps(const Array& out, const Array& in);

// True when two different index tuples of `x` can name the same element (a broadcast view, or
// strides that interleave).
bool self_overlapping(const Array& x);

}  // namespace flexkit::gemm
