// The CUDA GEMM kernels for exact integer products (flex16 × flex16 and flex16 × u8) on the
// int8 tensor cores. f32 products go through cuBLAS (gemm_cublas.hpp).
#pragma once
#include "backend/gemm_problem.hpp"
#include "backend/heavy_op_plan.hpp"

namespace flexkit::gemm {

// The plan gemm_integer_cuda runs `problem` with (gemm_plan.hpp), made on first use of its class.
const backend::HeavyOpPlan& gemm_integer_cuda_plan(const GemmProblem& problem, int device);

// Queues `problem` on `stream` (a cudaStream_t) of `device`. `device_stats` points to one
// portable::GemmStats in device memory, initialised by the caller to gemm_stats_identity(); the
// kernels merge their records into it with atomics (max, min and sum: order-independent).
// Plans (tile shape, split, workspace) are cached per shape class, so repeated shapes do not
// re-plan. Throws CudaError on a failed launch.
void gemm_integer_cuda(const GemmProblem& problem, int device, void* stream,
                       portable::GemmStats* device_stats);

}  // namespace flexkit::gemm
