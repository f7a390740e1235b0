// The PTX wrappers of the sm_90a GEMM kernels' data movement: cp.async copies into shared memory,
// shared-memory loads and stores by 32-bit shared address, and ldmatrix.
#pragma once
#include <cstdint>

namespace flexkit::backend::cuda::gemm_kernels {
namespace wgmma_detail {

__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}
// The ring depth is a run-time value (IntegerGemmArgs::raw_stages); the instruction wants an
// immediate.
// Waiting for fewer pending groups than asked is always safe, so anything unlisted waits for all.
__device__ __forceinline__ void cp_async_wait_dynamic(int pending) {
  switch (pending) {
    case 1:
      cp_async_wait<1>();
      break;
    case 2:
      cp_async_wait<2>();
      break;
    case 3:
      cp_async_wait<3>();
      break;
    case 4:
      cp_async_wait<4>();
      break;
    case 5:
      cp_async_wait<5>();
      break;
    case 6:
      cp_async_wait<6>();
      break;
    case 7:
      cp_async_wait<7>();
      break;
    default:
      cp_async_wait<0>();
      break;
  }
}
// Waits until at most `pending` groups are in flight: with one instruction where `pending` is
// that of a ring kDefaultDepth deep (its usual depth: the deepest that fits), else by the switch.
template <int kDefaultDepth>
__device__ __forceinline__ void cp_async_wait_ring(int pending) {
  if (pending == kDefaultDepth - 2) {
    cp_async_wait<kDefaultDepth - 2>();
  } else {
    cp_async_wait_dynamic(pending);
  }
}

// Shared-memory accesses by 32-bit shared address: the split's addresses are then one register
// plus an immediate, and the per-stage slot base is added once, not per access.
__device__ __forceinline__ uint4 lds128(uint32_t address) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(address)
               : "memory");
  return v;
}
__device__ __forceinline__ uint2 lds64(uint32_t address) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n"
               : "=r"(v.x), "=r"(v.y)
               : "r"(address)
               : "memory");
  return v;
}
__device__ __forceinline__ void sts128(uint32_t address, uint4 v) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(address), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}
__device__ __forceinline__ void sts32(uint32_t address, uint32_t v) {
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(address), "r"(v) : "memory");
}

// Four 8 × 8 matrices of 16-bit elements, transposed: lane t gives the address of row t % 8 of
// matrix t / 8 and receives, from each matrix, column t / 4 of rows 2·(t % 4) and 2·(t % 4) + 1.
__device__ __forceinline__ void ldsm_x4_trans(uint32_t address, uint32_t (&d)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
               : "r"(address)
               : "memory");
}

__device__ __forceinline__ uint32_t lds32(uint32_t address) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(address) : "memory");
  return v;
}

// Warp-specialised kernels: a named barrier over part of the CTA, and moving registers between
// the producer and consumer warpgroups.
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
template <int kRegisters>
__device__ __forceinline__ void raise_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void lower_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

// Four 8 × 8 matrices of 16-bit elements from the accumulator layout into shared memory: lane t
// gives the address of row t % 8 of matrix t / 8, register i holds matrix i's row t / 4, columns
// 2·(t % 4) and 2·(t % 4) + 1.
__device__ __forceinline__ void stsm_x4(uint32_t address, uint32_t r0, uint32_t r1, uint32_t r2,
                                        uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(address),
               "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

}  // namespace wgmma_detail
}  // namespace flexkit::backend::cuda::gemm_kernels
