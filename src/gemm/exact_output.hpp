// What every heavy product (dot, convolution) shares on the host side: the checks of its options
// and output, how the output's epilogue is made from the operands' exponents, how the `exact` iwl
// policy turns a measuring pass into an exponent, how the result's exponent and statistics are
// recorded, and the aliasing checks that keep an output from overwriting what the product still
// reads.
#pragma once
#include <cstdint>

#include "backend/exact_stats.hpp"
#include "backend/gemm_problem.hpp"
#include "core/flex16_write.hpp"
#include "core/shard_agreement.hpp"
#include "flexkit/array.hpp"
#include "flexkit/heavy_op_options.hpp"
#include "flexkit/portable/gemm_epilogue.hpp"

namespace flexkit::gemm {

// The element kind the backends see for an operand or output of `dtype` (f32, flex16, and u8 for
// the byte dtypes).
ElementKind kind_of(DType dtype);

// A matrix or a batch of them (any strides) as the kernels take it.
MatrixRef matrix_ref(const Array& x);

// C = A·B ⇔ Cᵀ = Bᵀ·Aᵀ: lets the kernels see every integer product with A flex16.
void transpose_problem(GemmProblem& p);

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

// The option checks of `operation` ("dot", "conv fprop"), whose output is called `out_name` in
// messages: an iwl or iwl policy only for a flex16 output, an iwl in range, finite alpha and beta.
void check_options(const char* operation, const char* out_name, const Array& out,
                   const HeavyOpOptions& options);
// A writable output that owns each of its elements (no broadcast view).
void check_output_owns_elements(const char* operation, const char* out_name, const Array& out);

// out = beta · out, an empty sum (at options.iwl when given).
void scale_output(const Array& out, const HeavyOpOptions& options);

// The options with IwlPolicy::autoflex resolved by `write` (exact for a manager's first write,
// fixed at the predicted iwl after it): what the exact passes run with.
HeavyOpOptions resolved_options(const HeavyOpOptions& options,
                                const detail::Flex16WritePlan& write);

// The output exponent of a call under the fixed policy: options.iwl, or the output's own (0 for an
// f32 output).
int fixed_out_iwl(const Array& out, const HeavyOpOptions& options);

// The passes of an integer product into `problem` (a GemmProblem or a ConvProblem), each run by
// run_pass(problem) → ExactStats: under the exact policy a measuring pass first, whose range picks
// the exponent; then the storing pass at that exponent (or at `out_iwl`). Returns the exponent
// stored at and the storing pass's statistics.
struct StoredResult {
  int out_iwl = 0;
  ExactStats stats;
};
template <typename Problem, typename RunPass>
StoredResult run_exact_passes(Problem& problem, const ExactOutput& exact, int out_iwl,
                              bool measure_first, RunPass&& run_pass) {
  if (measure_first) {
    problem.epilogue = make_epilogue(exact, out_iwl);
    problem.mode = EpilogueMode::measure;
    out_iwl = exact_iwl(detail::agreed_gemm_stats(run_pass(problem).value), exact);
  }
  problem.epilogue = make_epilogue(exact, out_iwl);
  problem.mode = EpilogueMode::store;
  return {out_iwl, run_pass(problem)};
}

// Whether `out` and `in` can share a byte (views of one storage whose element spans meet).
bool overlaps(const Array& out, const Array& in);

// True when two different index tuples of `x` can name the same element (a broadcast view, or
// strides that interleave).
bool self_overlapping(const Array& x);

}  // namespace flexkit::gemm
