// The CPU convolution kernels. ConvPlan's calls check and normalise their arguments into a
// ConvProblem (3 spatial dims, strides in elements) and run one of these.
//
// fprop and bprop are lowered onto gemm_cpu one block of output positions at a time: a packed
// filter matrix times a lowered block of the input (im2col) or of the gradient (a gather form of
// the transposed convolution, so no two threads ever add into one element). Each block holds the
// whole reduction, so every output is one exact integer sum finished once by the portable
// epilogue. update reduces over the batch and every output position, far too long to lower at
// once, so it drives the GEMM microkernels directly into int64 (or f32) accumulators over
// bounded chunks of positions, and finishes them through the same epilogue.
//
// Planned as every heavy operation is (backend/heavy_op_plan.hpp): the one formulation per
// direction runs on the GEMM microkernels of the fastest instruction set that applies, so a plan
// is that kernel set ("cpu.avx2", …) and the scratch one call takes.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/conv_problem.hpp"
#include "backend/cpu/gemm/gemm_kernels.hpp"
#include "backend/heavy_op_plan.hpp"
#include "flexkit/conv.hpp"

namespace flexkit::conv {

using backend::cpu::gemm_detail::GemmIsa;

struct ConvCpuPlan : backend::HeavyOpPlan {
  GemmIsa isa = GemmIsa::scalar;
};

// The plan of `problem` in `direction` under FLEXKIT_GEMM_ISA: cached per direction, element
// kinds and geometry (any strides run alike), logged under FLEXKIT_LOG=1 when made.
const ConvCpuPlan& conv_cpu_plan(ConvDirection direction, const ConvProblem& problem);
// Runs `problem` as `plan` says; the merged statistics (gemm_stats_identity() for f32).
portable::GemmStats run_conv_cpu(const ConvCpuPlan& plan, ConvDirection direction,
                                 const ConvProblem& problem);

// Each direction on the kernels of `isa`; the merged statistics (gemm_stats_identity() for f32
// products).
portable::GemmStats fprop_cpu(const ConvProblem& problem, GemmIsa isa);
portable::GemmStats bprop_cpu(const ConvProblem& problem, GemmIsa isa);
portable::GemmStats update_cpu(const ConvProblem& problem, GemmIsa isa);

// Scratch bytes the lowered blocks of one call take (operand elements of `element_bytes`).
std::size_t fprop_workspace_bytes(const Geometry& g, std::size_t element_bytes);
std::size_t bprop_workspace_bytes(const Geometry& g, std::size_t element_bytes);
std::size_t update_workspace_bytes(const Geometry& g, std::size_t element_bytes);

}  // namespace flexkit::conv
