// Stream-K scheduling of the lean implicit-GEMM kernels (see IntegerGemmArgs::sk_ctas): one CTA
// per multiprocessor runs whole tiles while every CTA has one, then all of them share the stages
// of the tiles left over, so that no last, partly empty wave of whole tiles idles the machine
// (a 3×3 C256 14×14 layer has 196 tiles of 36 stages for 132 multiprocessors: 1.48 waves).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/gemm/gemm_kernel_args.cuh"

namespace flexkit::backend::cuda::gemm_kernels {

struct StreamKPlan {
  int32_t ctas = 0;                 // CTAs sharing the leftover tiles; 0: stream-K does not apply
  int64_t first_tile = 0;           // tiles below it run whole, one per CTA and round
  int64_t tiles = 0;                // every tile of the launch
  int64_t parts = 0;                // slots per sharing CTA
  std::size_t workspace_bytes = 0;  // an int64 slot of 128 × 128 per part
};

// The plan for `tiles` output tiles of K = k on `sms` multiprocessors. Does not apply when the
// tiles fill whole waves, when a tile's K passes the int32 exactness bound of one CTA, or when a
// tile is too shallow for its parts to pay for their start and their atomics.
StreamKPlan plan_stream_k(int64_t tiles, int64_t k, int sms);

// Writes the plan into `args` (sk_ctas, sk_parts, sk_first_tile, sk_tiles; the caller sets
// workspace to the plan's bytes, which need no clearing: each part writes its whole slot).
void apply_stream_k(const StreamKPlan& plan, IntegerGemmArgs& args);

// After the lean kernel ran with `args`: every leftover tile's total from its workspace slice
// through the epilogue into args.c, statistics into args.stats.
void launch_finish_stream_k(const IntegerGemmArgs& args, cudaStream_t stream);

}  // namespace flexkit::backend::cuda::gemm_kernels
