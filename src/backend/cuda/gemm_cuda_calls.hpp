// What dot() calls on a CUDA device: f32 products through cuBLAS, integer products through the
// tensor-core kernels with their statistics brought back to the host.
#pragma once
#include "backend/exact_stats.hpp"
#include "backend/gemm_problem.hpp"
#include "backend/heavy_op_plan.hpp"

namespace flexkit::gemm {

// The plan dot() runs `problem` with on `device`: cuBLAS for f32 ("cuda.cublas_f32", through
// contiguous copies where cublas_accepts is false), the tensor-core kernels' plan for integer
// products. Cached per problem class, made (and logged under FLEXKIT_LOG=1) on first use.
const backend::HeavyOpPlan& gemm_cuda_plan(const GemmProblem& problem, int device);

// Whether cuBLAS takes the f32 problem's layouts as they are (one unit stride per matrix, leading
// strides cuBLAS accepts, non-negative batch strides); dot() stages the others through copies.
bool cublas_accepts(const GemmProblem& problem);

// C = alpha·A·B + beta·C in f32 with cuBLAS (TF32 off), queued on `stream`. Requires
// cublas_accepts(problem).
void gemm_f32_cuda(const GemmProblem& problem, int device, void* stream);

// Runs gemm_integer_cuda; its statistics come back pending (waited for in a measuring pass).
ExactStats gemm_integer_cuda_stats(const GemmProblem& problem, int device, void* stream);

}  // namespace flexkit::gemm
