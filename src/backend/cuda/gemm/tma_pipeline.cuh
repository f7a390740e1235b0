// Thin wrappers around the sm_90 bulk-tensor copy (TMA) and the shared-memory mbarriers that
// order it against its consumers: what the planar GEMM kernel's pipeline is built from. Device
// code only for sm_90a (the callers guard with __CUDA_ARCH_FEAT_SM90_ALL).
#pragma once
#include <cuda.h>

#include <cstdint>

namespace flexkit::backend::cuda::gemm_kernels::tma {

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void barrier_init(uint32_t barrier, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(barrier), "r"(arrivals)
               : "memory");
}

// Makes initialised barriers visible to the async proxy (the TMA unit) before first use.
__device__ __forceinline__ void barrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

__device__ __forceinline__ void arrive(uint32_t barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(barrier) : "memory");
}

// One arrival that also announces `bytes` still to come from bulk copies completing on it.
__device__ __forceinline__ void arrive_expect_bytes(uint32_t barrier, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(barrier), "r"(bytes)
               : "memory");
}

// Spins until the barrier's phase of the given parity has completed.
__device__ __forceinline__ void wait(uint32_t barrier, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(barrier), "r"(parity)
        : "memory");
  } while (!done);
}

__device__ __forceinline__ void prefetch_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// One box of a 2-D tensor map (coordinates innermost first) into shared memory at `dst`.
__device__ __forceinline__ void load_2d(uint32_t dst, const CUtensorMap* map, int32_t c0,
                                        int32_t c1, uint32_t barrier) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(barrier)
      : "memory");
}

// One box of a 4-D tensor map into shared memory at `dst`, completing `bytes` on `barrier`.
// Elements outside the tensor's extents arrive as zeros (and still count as bytes).
__device__ __forceinline__ void load_4d(uint32_t dst, const CUtensorMap* map, int32_t c0,
                                        int32_t c1, int32_t c2, int32_t c3, uint32_t barrier) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(barrier)
      : "memory");
}

// The same for a 5-D tensor map, under an L2 eviction policy (createpolicy) for the lines it
// reads.
__device__ __forceinline__ void load_5d_hinted(uint32_t dst, const CUtensorMap* map, int32_t c0,
                                               int32_t c1, int32_t c2, int32_t c3, int32_t c4,
                                               uint32_t barrier, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      ".L2::cache_hint [%0], [%1, {%2, %3, %4, %5, %6}], [%7], %8;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4),
      "r"(barrier), "l"(policy)
      : "memory");
}

// ---- stores: shared memory to global through the bulk tensor copy --------------------------

// One box of a 2-D tensor map from shared memory at `src` to global memory, its lines written
// under an L2 eviction policy (createpolicy). Elements of the box outside the tensor's extents
// are not written. The issuing thread tracks it in its own bulk group (store_commit,
// store_wait_read). The writes to `src` must be ordered before it by
// fence.proxy.async.shared::cta in the threads that made them.
__device__ __forceinline__ void store_2d_hinted(const CUtensorMap* map, int32_t c0, int32_t c1,
                                                uint32_t src, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group.L2::cache_hint [%0, {%1, %2}], "
      "[%3], %4;\n" ::"l"(reinterpret_cast<uint64_t>(map)),
      "r"(c0), "r"(c1), "r"(src), "l"(policy)
      : "memory");
}

// An L2 policy that evicts first the lines it marks: for outputs written once and never read
// back by the kernel.
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}

// Closes this thread's bulk group of the stores issued since the last commit.
__device__ __forceinline__ void store_commit() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

// Waits until at most `kPending` of this thread's committed store groups still read their
// shared-memory source (their global writes may still be under way).
template <int kPending>
__device__ __forceinline__ void store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}

// Waits until at most `kPending` of this thread's committed store groups are incomplete.
template <int kPending>
__device__ __forceinline__ void store_wait() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(kPending) : "memory");
}

}  // namespace flexkit::backend::cuda::gemm_kernels::tma
