// The CUDA convolution's plans, and its convolutions on the int8 tensor cores (sm_90a): the exact
// GEMM kernel of gemm_wgmma.cuh with its B operand gathered from the activations inside the
// kernel (implicit GEMM, ConvGather), so no lowered copy of the input ever exists. Integer
// products only; every output is the exact int64 sum finished once by the portable epilogue,
// bit-identical to the CPU and the direct kernels.
//
//   fprop:  O[k, (position, n)]     = Σ_(tap, c) F[c, tap, k] · I[c, x(position, tap), n]
//   bprop:  gradI[c, (position, n)] = Σ_(tap, k) F[c, tap, k] · E[k, o(position, tap), n]
//           (o = (position + pad − tap·dil) / stride where that division is exact)
//   update: gradF[c, tap, k]        = Σ_(position, n) E[k, position, n] · I[c, x(position, tap), n]
//           (one GEMM per tap, all taps in one launch)
//
// The tensor cores take a problem when the layout fits: n the unit stride of the gathered operand
// with a batch that is a multiple of 8 (16 for u8 spikes), 16-byte aligned channel and position
// strides, the filter's k axis (fprop, bprop) or the gradient's (position, n) axes (update) of
// unit stride, no upscale. Everything else runs on the direct kernels (conv_direct.cu).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/conv_problem.hpp"
#include "backend/cuda/gemm/gemm_stream_k.hpp"
#include "backend/cuda/pending_stats.hpp"
#include "backend/heavy_op_plan.hpp"

namespace flexkit::conv {

enum class ImplicitDirection { fprop, bprop, update };

// The candidates, in the order the planner tries them (conv_cuda_plan.cu), the first that applies
// being planned; direct takes everything the others do not.
enum class ConvCudaKernel : std::uint8_t {
  shallow_transposed,   // "cuda.implicit_gemm.shallow_transposed"
  shallow_specialized,  // "cuda.implicit_gemm.shallow_specialized"
  shallow,              // "cuda.implicit_gemm.shallow"
  deep_k,               // "cuda.deep_k"
  stream_k,             // "cuda.implicit_gemm.stream_k"
  lean,                 // "cuda.implicit_gemm.lean"
  direct,               // "cuda.direct"
};

struct ConvCudaPlan : backend::HeavyOpPlan {
  ConvCudaKernel kernel = ConvCudaKernel::direct;
  std::int64_t tiles_m = 0, tiles_n = 0;  // 128 × 128 output tiles of one tap
  std::int64_t ctas = 0;                  // the shallow kernels' persistent grid; stream-K's CTAs
  std::int32_t splits = 1;                // lean: the K split
  std::int64_t k_chunk = 0;
  backend::cuda::gemm_kernels::StreamKPlan stream_k{};
};

// The plan of `problem` in `direction` on `device` (made with the device current, once per
// problem class: device, direction, element kinds, geometry, strides, alignment, epilogue class
// and the FLEXKIT_CONV_* settings). Throws ValueError for a bad FLEXKIT_CONV_* value.
const ConvCudaPlan& conv_cuda_plan(ImplicitDirection direction, const ConvProblem& problem,
                                   int device);

// Queues the tensor-core kernels of `plan` (any kernel but direct) for the integer products of
// `problem` on `stream`. The kernels merge their statistics into `record`; one that is its
// call's only kernel publishes it too (DeviceStatsRecord::published_in_kernel).
void run_implicit_gemm(const ConvCudaPlan& plan, ImplicitDirection direction,
                       const ConvProblem& problem, int device, cudaStream_t stream,
                       backend::cuda::DeviceStatsRecord& record);

// The direct update's slices (conv_direct.cu): how many fixed slices of its reduction each filter
// element's sum is cut into, how long each is, and the partial sums they keep.
struct DirectUpdateSlices {
  std::int64_t slices = 1, slice_terms = 0;
  std::size_t partials_bytes = 0;
};
DirectUpdateSlices direct_update_slices(const Geometry& g, std::size_t accumulator_bytes);

}  // namespace flexkit::conv
