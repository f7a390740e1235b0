// The statistics of an exact integer kernel (GEMM, convolution), reduced across a block and
// merged into the call's record in device memory. Every field is a max, min or sum of integers,
// so the integer atomics give the same record whatever order blocks arrive in.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/stats_publish.cuh"
#include "flexkit/portable/gemm_epilogue.hpp"

namespace flexkit::backend::cuda {

__device__ __forceinline__ void warp_reduce_stats(portable::GemmStats& s) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    portable::GemmStats o;
    o.max_abs_m = __shfl_xor_sync(0xffffffffu, s.max_abs_m, offset);
    o.pad = 0;
    o.saturated = __shfl_xor_sync(0xffffffffu, (unsigned long long)s.saturated, offset);
    o.acc_max = __shfl_xor_sync(0xffffffffu, (long long)s.acc_max, offset);
    o.acc_min = __shfl_xor_sync(0xffffffffu, (long long)s.acc_min, offset);
    o.value_max_key = __shfl_xor_sync(0xffffffffu, (unsigned long long)s.value_max_key, offset);
    o.value_min_key = __shfl_xor_sync(0xffffffffu, (unsigned long long)s.value_min_key, offset);
    portable::gemm_stats_merge(s, o);
  }
}

// Thread 0 of a block, after its atomics on *global, where the kernel publishes the record
// itself (`arrivals` not null): the arrival releases this block's atomics and acquires those of
// the blocks before it, so the last to arrive sees every block's and publishes the record.
__device__ __forceinline__ void arrive_for_publication(portable::GemmStats* global,
                                                       portable::GemmStats* host,
                                                       uint32_t* arrivals) {
  if (arrivals == nullptr) return;
  uint32_t before;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;\n"
               : "=r"(before)
               : "l"(arrivals)
               : "memory");
  if (before != gridDim.x * gridDim.y * gridDim.z - 1) return;
  // No system-scope fence: the host reads the copy only after an event behind this kernel.
  publish_record(global, host, arrivals, false);
}

// Merges every thread's record into *global with one set of atomics per block. All threads of
// the block must call it (it synchronises); blockDim.x must be a multiple of 32 and ≤ 1024.
// With `arrivals` (a counter at 0, where the kernel is its call's only one and every block calls
// this exactly once), the last block to arrive publishes the record into `host` and sets record
// and counter back (stats_publish.cuh): no publish kernel has to follow.
__device__ __forceinline__ void commit_block_stats(portable::GemmStats local,
                                                   portable::GemmStats* global,
                                                   portable::GemmStats* host = nullptr,
                                                   uint32_t* arrivals = nullptr) {
  __shared__ portable::GemmStats per_warp[32];
  warp_reduce_stats(local);
  const int warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  __syncthreads();  // per_warp may still be read by an earlier call in this block
  if ((threadIdx.x & 31) == 0) per_warp[warp] = local;
  __syncthreads();
  if (threadIdx.x != 0) return;
  portable::GemmStats s = per_warp[0];
  for (int w = 1; w < warps; ++w) portable::gemm_stats_merge(s, per_warp[w]);
  // Only fields this block changed: max/min/sum are order-free, so skipping no-ops is exact.
  const portable::GemmStats id = portable::gemm_stats_identity();
  if (s.max_abs_m != id.max_abs_m) atomicMax(&global->max_abs_m, s.max_abs_m);
  if (s.saturated != 0)
    atomicAdd(reinterpret_cast<unsigned long long*>(&global->saturated),
              static_cast<unsigned long long>(s.saturated));
  if (s.acc_max != id.acc_max)
    atomicMax(reinterpret_cast<long long*>(&global->acc_max), static_cast<long long>(s.acc_max));
  if (s.acc_min != id.acc_min)
    atomicMin(reinterpret_cast<long long*>(&global->acc_min), static_cast<long long>(s.acc_min));
  if (s.value_max_key != id.value_max_key)
    atomicMax(reinterpret_cast<unsigned long long*>(&global->value_max_key),
              static_cast<unsigned long long>(s.value_max_key));
  if (s.value_min_key != id.value_min_key)
    atomicMin(reinterpret_cast<unsigned long long*>(&global->value_min_key),
              static_cast<unsigned long long>(s.value_min_key));
  arrive_for_publication(global, host, arrivals);
}

// The block's max |m| and clamped count from every thread's own, in thread 0 (the other threads
// get zeros). Every thread of the block calls it.
struct BlockStoreStats {
  uint32_t max_abs_m;
  unsigned long long saturated;
};
__device__ __forceinline__ BlockStoreStats reduce_block_store_stats(uint32_t max_abs_m,
                                                                    uint32_t saturated) {
  __shared__ uint32_t per_warp[32][2];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  max_abs_m = __reduce_max_sync(0xffffffffu, max_abs_m);
  saturated = __reduce_add_sync(0xffffffffu, saturated);
#else
  for (int offset = 16; offset > 0; offset >>= 1) {
    const uint32_t m = __shfl_xor_sync(0xffffffffu, max_abs_m, offset);
    max_abs_m = m > max_abs_m ? m : max_abs_m;
    saturated += __shfl_xor_sync(0xffffffffu, saturated, offset);
  }
#endif
  const int warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  __syncthreads();  // per_warp may still be read by an earlier call in this block
  if ((threadIdx.x & 31) == 0) {
    per_warp[warp][0] = max_abs_m;
    per_warp[warp][1] = saturated;
  }
  __syncthreads();
  BlockStoreStats block{0, 0};
  if (threadIdx.x != 0) return block;
  for (int w = 0; w < warps; ++w) {
    block.max_abs_m = per_warp[w][0] > block.max_abs_m ? per_warp[w][0] : block.max_abs_m;
    block.saturated += per_warp[w][1];
  }
  return block;
}

// The record of the common store (flex16 out, no measuring): only max |m| and the clamped count
// change, so only they are reduced, by the warps' reduce instructions where the device has them
// (commit_block_stats shuffles all six fields, 64-bit ones in two halves: about 175 instructions
// a thread, as many as the rest of a finishing pass's work). Same calling rules; `saturated` is a
// thread's count (the block's total must fit in 32 bits).
__device__ __forceinline__ void commit_block_store_stats(uint32_t max_abs_m, uint32_t saturated,
                                                         portable::GemmStats* global,
                                                         portable::GemmStats* host = nullptr,
                                                         uint32_t* arrivals = nullptr) {
  const BlockStoreStats block = reduce_block_store_stats(max_abs_m, saturated);
  if (threadIdx.x != 0) return;
  // The identity record has max_abs_m 0 and saturated 0: skipping those is exact.
  if (block.max_abs_m != 0) atomicMax(&global->max_abs_m, static_cast<int32_t>(block.max_abs_m));
  if (block.saturated != 0)
    atomicAdd(reinterpret_cast<unsigned long long*>(&global->saturated), block.saturated);
  arrive_for_publication(global, host, arrivals);
}

}  // namespace flexkit::backend::cuda
