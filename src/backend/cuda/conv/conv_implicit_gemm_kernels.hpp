// The implicit-GEMM instantiations of the exact wgmma kernel (one translation unit per element
// type of the gathered operand, to spread the build).
#pragma once
#include <cuda_runtime.h>

#include "backend/cuda/gemm/gemm_kernel_args.cuh"
#include "backend/heavy_op_plan.hpp"

namespace flexkit::backend::cuda::gemm_kernels {

// fprop: filter A m-contiguous, activations gathered tap-major (n-contiguous); bprop: filter A
// k-contiguous, gradient gathered the same way; update: gradient A k-contiguous, activations
// gathered k-contiguous, one tap per grid z.
enum class ImplicitKernel { fprop, bprop, update };

// `stream_k` (update only): the kernel that walks args' stream-K schedule, one CTA per grid
// entry, instead of one tile (and K split) per CTA. Preparing update prepares both.
bool prepare_gather_s16(ImplicitKernel kernel);
void launch_gather_s16(ImplicitKernel kernel, bool stream_k, dim3 grid, const IntegerGemmArgs& args,
                       cudaStream_t stream);
// u8 spikes: fprop and update only.
bool prepare_gather_u8(ImplicitKernel kernel);
void launch_gather_u8(ImplicitKernel kernel, bool stream_k, dim3 grid, const IntegerGemmArgs& args,
                      cudaStream_t stream);

// The shallow persistent kernel (gemm_shallow.cuh) for K of at most shallow_max_stages() stages:
// fprop and bprop of flex16 activations, fprop of u8 spikes. grid.x is a multiple of
// args.tiles_m (each CTA walks one tile row's columns).
bool prepare_shallow(ImplicitKernel kernel, bool b_is_u8);
void launch_shallow(ImplicitKernel kernel, bool b_is_u8, dim3 grid, const IntegerGemmArgs& args,
                    cudaStream_t stream);
int shallow_max_stages();
// The same for flex16 activations with the work divided by role (gemm_shallow_specialized.cuh):
// a producer warpgroup gathers and splits B, two consumer warpgroups multiply and round.
// `b_plain`: the gathered operand is a plain matrix (a 1×1 filter at stride 1 without padding,
// its positions one unit stride), which the producer may then load by bulk tensor copies; returns
// whether it does.
bool prepare_shallow_specialized(ImplicitKernel kernel);
bool launch_shallow_specialized(ImplicitKernel kernel, dim3 grid, const IntegerGemmArgs& args,
                                bool b_plain, cudaStream_t stream);
// The transposed form (gemm_shallow_transposed.cuh) for at most 64 output rows (or 256 over one
// stage) where the gathered operand is a plain matrix: the activations in the wgmmas' registers,
// no split through shared memory. can_implement says whether it takes `args` (not: more rows, K
// past four stages, operands its tensor maps cannot describe); what it decides depends on the
// pointers only through their 16-byte alignment. The launch, on up to `sms` CTAs, returns false
// (and queues nothing) where can_implement would say no.
bool prepare_shallow_transposed(ImplicitKernel kernel);
backend::CanImplement can_implement_shallow_transposed(ImplicitKernel kernel,
                                                       const IntegerGemmArgs& args);
bool launch_shallow_transposed(ImplicitKernel kernel, const IntegerGemmArgs& args, int sms,
                               cudaStream_t stream);

}  // namespace flexkit::backend::cuda::gemm_kernels
