// The CUDA convolution ConvPlan's calls run on cuda arrays: the tensor-core kernels where the plan
// takes them (conv_implicit_gemm.hpp), otherwise a direct formulation (no lowering), every output
// computed from one exact int64 accumulator (integer products) and finished through the portable
// GEMM epilogue, so flex16 results are bit-identical to the CPU's (docs/flex16.md). f32 products
// sum in one fixed order per output (deterministic, not the CPU's order).
//
// The problem is the one the CPU kernels take (conv_problem.hpp), with device pointers.
#pragma once
#include "backend/conv_problem.hpp"
#include "backend/exact_stats.hpp"
#include "backend/heavy_op_plan.hpp"
#include "flexkit/conv.hpp"

namespace flexkit::conv {

// The plan a call in `direction` runs `problem` with on `device` (the tensor cores' kernels or
// the direct ones, conv_cuda_plan.cu), made on first use of its problem class.
const backend::HeavyOpPlan& cuda_plan(ConvDirection direction, const ConvProblem& problem,
                                      int device);

// Each queues one direction on `stream` (a cudaStream_t) of `device`, as its plan says. Integer
// products return their statistics pending (EpilogueMode::measure: waited for, the measured
// range); f32 products return gemm_stats_identity() without waiting.
gemm::ExactStats fprop_cuda(const ConvProblem& problem, int device, void* stream);
gemm::ExactStats bprop_cuda(const ConvProblem& problem, int device, void* stream);
gemm::ExactStats update_cuda(const ConvProblem& problem, int device, void* stream);

}  // namespace flexkit::conv
