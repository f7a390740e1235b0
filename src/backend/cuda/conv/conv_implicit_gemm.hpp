// Convolutions on the int8 tensor cores (sm_90a): the exact GEMM kernel of gemm_wgmma.cuh with
// its B operand gathered from the activations inside the kernel (implicit GEMM, ConvGather), so no
// lowered copy of the input ever exists. Integer products only; every output is the exact int64
// sum finished once by the portable epilogue, bit-identical to the CPU and the direct kernels.
//
//   fprop:  O[k, (position, n)]     = Σ_(tap, c) F[c, tap, k] · I[c, x(position, tap), n]
//   bprop:  gradI[c, (position, n)] = Σ_(tap, k) F[c, tap, k] · E[k, o(position, tap), n]
//           (o = (position + pad − tap·dil) / stride where that division is exact)
//   update: gradF[c, tap, k]        = Σ_(position, n) E[k, position, n] · I[c, x(position, tap), n]
//           (one GEMM per tap, all taps in one launch)
//
// Taken when the layout fits: n the unit stride of the gathered operand with a batch that is a
// multiple of 8 (16 for u8 spikes), 16-byte aligned channel and position strides, the filter's
// k axis (fprop, bprop) or the gradient's (position, n) axes (update) of unit stride, no upscale.
// Everything else runs on the direct kernels (conv_direct.hpp).
#pragma once
#include <cuda_runtime.h>

#include "backend/conv_problem.hpp"
#include "backend/cuda/pending_stats.hpp"

namespace flexkit::conv {

enum class ImplicitDirection { fprop, bprop, update };

// Queues the integer products of `problem` on `stream` and returns true when the tensor-core
// path fits (device, layout, geometry); returns false and queues nothing otherwise. The kernels
// merge their statistics into `record`; one that is its call's only kernel publishes it too
// (DeviceStatsRecord::published_in_kernel).
// FLEXKIT_CONV_KERNEL=direct turns the path off, =lean runs 1x1 layers one tile per CTA instead
// of on the persistent shallow kernel, =lockstep runs flex16 ones on the shallow kernel's one-role
// form instead of its warp-specialised one (conv_implicit_gemm.cu); FLEXKIT_CONV_LOG=1 prints each
// choice.
bool implicit_gemm_cuda(ImplicitDirection direction, const ConvProblem& problem, int device,
                        cudaStream_t stream, backend::cuda::DeviceStatsRecord& record);

}  // namespace flexkit::conv
