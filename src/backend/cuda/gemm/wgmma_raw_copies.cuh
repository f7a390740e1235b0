// The cp.async copies that fill the raw ring (wgmma_ring.cuh): the guarded copies of any stage,
// and the lean kernel's unguarded fast path for interior tiles and full stages.
#pragma once
#include <cstdint>

#include "backend/cuda/gemm/gemm_wgmma.hpp"
#include "backend/cuda/gemm/wgmma_ptx.cuh"
#include "backend/cuda/gemm/wgmma_ring.cuh"

namespace flexkit::backend::cuda::gemm_kernels {
namespace wgmma_detail {

// Copies of one stage (`tile` at row 0, k 0 of the stage) into the raw slot at shared address
// `raw`; consecutive threads take consecutive 16-byte chunks along the unit stride (coalesced).
// int16: a line (a row where K is the unit stride, else a k-row) of 8 (16) chunks of 8 elements,
// `lines_valid` lines and `along_valid` elements of each inside.
template <bool kKContig>
__device__ __forceinline__ void copy_s16(uint32_t raw, const int16_t* tile, int64_t ld,
                                         int lines_valid, int along_valid) {
  constexpr int kShift = kKContig ? 3 : 4;  // log2 of the chunks per line
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int c = threadIdx.x + kWgmmaThreads * j;
    const int line = c >> kShift, chunk = c & ((1 << kShift) - 1);
    const int valid = line < lines_valid ? clamp_valid(along_valid - 8 * chunk, 8) : 0;
    const int16_t* src = valid > 0 ? tile + line * ld + 8 * chunk : tile;
    const uint32_t dst =
        kKContig ? raw_kcontig_s16_offset(line, chunk) : raw_rowcontig_offset(line, chunk, 256);
    cp_async_16(raw + dst, src, 2 * valid);
  }
}
template <int kRows>
__device__ __forceinline__ void copy_u8_kcontig(uint32_t raw, const uint8_t* tile, int64_t ld,
                                                int rows_valid, int k_valid) {
#pragma unroll
  for (int j = 0; j < kRows * 4 / kWgmmaThreads; ++j) {
    const int c = threadIdx.x + kWgmmaThreads * j;
    const int row = c >> 2, chunk = c & 3;
    const int valid = row < rows_valid ? clamp_valid(k_valid - 16 * chunk, 16) : 0;
    const uint8_t* src = valid > 0 ? tile + row * ld + 16 * chunk : tile;
    cp_async_16(raw + row * 64 + 16 * chunk, src, valid);
  }
}
template <int kRows>
__device__ __forceinline__ void copy_u8_rowcontig(uint32_t raw, const uint8_t* tile, int64_t ld,
                                                  int rows_valid, int k_valid) {
  constexpr int kChunks = kRows / 16;  // per k-row
#pragma unroll
  for (int j = 0; j < kRows * 4 / kWgmmaThreads; ++j) {
    const int c = threadIdx.x + kWgmmaThreads * j;
    const int k = c / kChunks, chunk = c % kChunks;
    const int valid = k < k_valid ? clamp_valid(rows_valid - 16 * chunk, 16) : 0;
    const uint8_t* src = valid > 0 ? tile + k * ld + 16 * chunk : tile;
    cp_async_16(raw + raw_u8_rowcontig_offset<kRows>(k, chunk), src, valid);
  }
}

template <typename Element, bool kKContig, int kRows = kWgmmaTileN>
__device__ __forceinline__ void copy_raw_stage(uint32_t raw, const Element* tile, int64_t ld,
                                               int rows_valid, int k_valid) {
  static_assert(kRows == 128 || sizeof(Element) == 1, "only a u8 B has a wider tile");
  if constexpr (sizeof(Element) == 2) {
    if constexpr (kKContig) {
      copy_s16<true>(raw, tile, ld, rows_valid, k_valid);
    } else {
      copy_s16<false>(raw, tile, ld, k_valid, rows_valid);
    }
  } else if constexpr (kKContig) {
    copy_u8_kcontig<kRows>(raw, tile, ld, rows_valid, k_valid);
  } else {
    copy_u8_rowcontig<kRows>(raw, tile, ld, rows_valid, k_valid);
  }
}

// Fast-path copies of one operand (kRows rows × 64 k of Element) into a raw slot. Chunk j of a
// thread sits at src + j·step in global memory (except chunk 2 of a wide n-contiguous u8 tile,
// at src + extra) and at dst(j) in the slot; see the copy_* functions above for the layouts.
template <typename Element, bool kKContig, int kRows>
struct LeanCopy {
  static constexpr int kChunks = kRows * kWgmmaStageK * int(sizeof(Element)) / 16 / kWgmmaThreads;
  static constexpr bool kS16 = sizeof(Element) == 2;
  // A 192-row n-contiguous u8 tile has 12 chunks per k-row: chunks 0-7 of each k-row in two
  // affine passes, chunks 8-11 in a third of four threads per k-row.
  static constexpr bool kWideRowContig = !kS16 && !kKContig && kRows == kWideTileN;
  static constexpr uint32_t kDstStep = kS16 && kKContig ? 4096u
                                       : kS16           ? 256u * kRowContigS16KStep
                                       : kKContig       ? 4096u
                                                        : uint32_t(kRows) * 32u;

  const unsigned char* src;  // this thread's chunk 0 in the next stage to copy
  int64_t step;              // bytes from chunk j to chunk j + 1
  int64_t extra;             // kWideRowContig: bytes from chunk 0 to chunk 2
  uint32_t dst0, dst1;       // slot offsets (dst1: chunk 2 of kWideRowContig)

  __device__ __forceinline__ void init(const Element* tile, int64_t ld) {
    const int t = threadIdx.x;
    int64_t first = 0;  // elements
    extra = 0;
    dst1 = 0;
    if constexpr (kS16 && kKContig) {
      const int row = t >> 3, chunk = t & 7;
      first = row * ld + 8 * chunk;
      step = 32 * ld * 2;
      dst0 = raw_kcontig_s16_offset(row, chunk);
    } else if constexpr (kS16) {
      // k-rows k + 2j share the chunk swizzle key.
      const int k = rowcontig_s16_first_k(t >> 4), chunk = t & 15;
      first = k * ld + 8 * chunk;
      step = kRowContigS16KStep * ld * 2;
      dst0 = raw_rowcontig_offset(k, chunk, 256);
    } else if constexpr (kKContig) {
      const int row = t >> 2, chunk = t & 3;
      first = row * ld + 16 * chunk;
      step = 64 * ld;
      dst0 = row * 64 + 16 * chunk;
    } else {
      const int k = t >> 3, chunk = t & 7;
      first = k * ld + 16 * chunk;
      step = 32 * ld;
      dst0 = raw_u8_rowcontig_offset<kRows>(k, chunk);
      if constexpr (kWideRowContig) {
        const int k2 = t >> 2, chunk2 = 8 + (t & 3);
        extra = (int64_t(k2) * ld + 16 * chunk2 - first) * int64_t(sizeof(Element));
        dst1 = raw_u8_rowcontig_offset<kRows>(k2, chunk2);
      }
    }
    src = reinterpret_cast<const unsigned char*>(tile + first);
  }

  __device__ __forceinline__ uint32_t dst(int j) const {
    if constexpr (kWideRowContig) return j == 2 ? dst1 : dst0 + kDstStep * j;
    return dst0 + kDstStep * j;
  }

  // All chunks of the stage at src into the raw slot at shared address `slot`, 16 bytes each.
  __device__ __forceinline__ void issue(uint32_t slot) const {
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
      const unsigned char* s = kWideRowContig && j == 2 ? src + extra : src + j * step;
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(slot + dst(j)), "l"(s)
                   : "memory");
    }
  }
};

}  // namespace wgmma_detail
}  // namespace flexkit::backend::cuda::gemm_kernels
