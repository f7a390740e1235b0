// Convolutions whose filter holds few values per output channel, C·T·R·S ≤ 32 (a first layer
// over images: one to three channels through a 3×3 filter). The tensor cores' gather pads every
// tap's channels to a stage of 64 (fprop) and every tap's rows to a tile of 128 (update), so
// there they do 7 to 128 times the work and run far below the memory's rate; these kernels
// compute each output from registers instead:
//
// - fprop: a thread per output column (position, n), its C·T·R·S input values gathered once into
//   registers, then 16 output channels from a filter slice in shared memory (coalesced stores);
// - update: a block per (slice of the reduction, group of output channels), each thread summing
//   every filter row of its channels over its terms, the block's sums as slice partials, then the
//   direct update's second pass (the partials added in slice order).
//
// Exact int64 sums finished by the portable epilogue: bit-identical to the CPU and to the other
// kernels. Integer operands only, no upscale, positions × N < 2^31.
#pragma once
#include <cuda_runtime.h>

#include "backend/conv_problem.hpp"
#include "backend/cuda/conv/conv_direct_common.cuh"
#include "backend/cuda/conv/conv_implicit_gemm.hpp"
#include "backend/heavy_op_plan.hpp"

namespace flexkit::conv {

// The most values of a filter per output channel these kernels take.
inline constexpr std::int64_t kSmallReductionMax = 32;

// Whether `problem` in `direction` is one for these kernels (bprop never is).
backend::CanImplement small_reduction_fits(ImplicitDirection direction, const ConvProblem& problem);

// Queues `direction` (fprop or update) of the problem `a` describes on `stream`; the kernels
// commit their statistics to a.stats.
void run_small_reduction(ImplicitDirection direction, direct::Args a, cudaStream_t stream,
                         int device);

}  // namespace flexkit::conv
