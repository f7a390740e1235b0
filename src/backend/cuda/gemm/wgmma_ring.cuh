// The shared-memory layout of the sm_90a GEMM kernels: byte planes, the raw ring's tile layouts and
// swizzles, and the sizes and depths that fit in shared memory.
#pragma once
#include <cstdint>

#include "backend/cuda/gemm/gemm_wgmma.hpp"
#include "backend/cuda/gemm/wgmma_int8.cuh"

namespace flexkit::backend::cuda::gemm_kernels {
namespace wgmma_detail {

// One byte plane of one stage: 128 rows (of M or N) × 64 k-bytes, swizzled.
inline constexpr int kPlaneBytes = kWgmmaTileM * kWgmmaStageK;
// The epilogue parks the int64 accumulators of the whole tile in shared memory, rows padded by
// one element so that walking down a column does not hit one bank.
inline constexpr int kTilePitch = kWgmmaTileN + 1;
inline constexpr int kAccumulatorTileBytes = kWgmmaTileM * kTilePitch * 8;
inline constexpr int kAlignSlack = 1024;  // the ring must start on a 1024-byte boundary
static_assert(kWgmmaThreads == 256 && kWgmmaTileM == 128 && kWgmmaTileN == 128 &&
                  kWgmmaStageK == 64,
              "the loaders' thread mapping assumes these sizes");

// ---------------------------------------------------------------------------------------------
// The raw ring (the "deep" kernels): whole stages of the operands exactly as they are in global
// memory (int16 or u8, not yet split), copied by cp.async straight into shared memory. Nothing
// passes through registers, so every thread keeps 4 (int16) or 2 (u8) 16-byte copies per
// operand and stage in flight, for as many stages as the ring has slots: that is what feeds the
// tensor cores across the ~1 µs load latency. The splitters then read the raw tile back from
// shared memory and split it into the planes.
//
// Raw tile layouts and their 16-byte chunk swizzles (chosen so that the split loaders' reads,
// register-A fragment reads and the copies are all free of bank conflicts):
//   k-contiguous int16:  128 rows × 128 bytes; chunk c of row r at r·128 + 16·(c ^ f(r)) with
//                        f(r) = 2·(r % 4) + (r % 2) (0, 3, 4, 7): rows 2q and 2q+1 differ in bit 0
//                        (the split loader reads rows pairwise), four consecutive rows differ in
//                        bits 1-2 (register-A fragment reads take two adjacent chunks of four
//                        rows).
//   row-contiguous int16: 64 k-rows × 256 bytes; chunk c (8 rows) of k-row k at
//                        k·256 + 16·(c ^ g(k)) with g(k) = (k % 2) + 2·(k/16 % 4): the
//                        transposing split's ldmatrix reads one chunk of the eight k-rows
//                        16j + 2i + b (j = 0 … 3, b = 0, 1) at once, and g takes eight values
//                        there. A copying thread's four chunks are k-rows k, k + 2, k + 4, k + 6
//                        (rowcontig_s16_first_k), which share one key: 512 bytes apart.
//   k-contiguous u8:     128 rows × 64 bytes, unswizzled (a quarter-warp reads 128 dense bytes).
//   row-contiguous u8:   64 k-rows × 128 bytes; chunk c of k-row k at k·128 + 16·(c ^ (k/4 % 8))
//                        (8-byte reads: kw and kw + 8 share a bank, a 2-way conflict on 8 KB).
// Elements past the matrix are zero-filled by the copies' source size (0 … 16 bytes), so the
// raw readers need no guards. Every copy address is 16-byte aligned: the host sends only
// operands whose base, rows and batch stride are (classify in gemm_integer.cu), K chunks start
// at multiples of 64 and the tile origins at multiples of 128 rows.

inline constexpr int kRawS16Bytes = kWgmmaTileM * kWgmmaStageK * 2;  // one int16 operand stage
inline constexpr int kRawU8Bytes = kWgmmaTileM * kWgmmaStageK;       // one u8 operand stage
inline constexpr int kDeepPlaneSlots = 3;  // plane ring of the deep SS kernel (see its loop)
// A u8 B uses a wider N tile in GEMMs: its two accumulators then take
// 2 · 96 registers, and each CTA reads 448 instead of 384 bytes of operands per k for 1.5 times
// the products, which eases the L2 → SM traffic that bounds the u8 case.
inline constexpr int kWideTileN = 192;
static_assert(kWideTileN == kWgmmaWideTileN, "one wide tile width");

// Sizes for an N tile of tile_n (B rows); A always has kWgmmaTileM rows.
__host__ __device__ constexpr int raw_stage_bytes(bool b_is_u8, int tile_n = kWgmmaTileN) {
  return kRawS16Bytes + (b_is_u8 ? 1 : 2) * tile_n * kWgmmaStageK;
}
__host__ __device__ constexpr int deep_stage_bytes(bool b_is_u8, int tile_n) {
  return 2 * kPlaneBytes + (b_is_u8 ? 1 : 2) * tile_n * wgmma::kRowBytes;
}
__host__ __device__ constexpr int accumulator_tile_bytes(int tile_n) {
  return kWgmmaTileM * (tile_n + 1) * 8;
}
__host__ __device__ constexpr int deep_smem_bytes(bool b_is_u8, int raw_stages,
                                                  int tile_n = kWgmmaTileN) {
  return (kDeepPlaneSlots * deep_stage_bytes(b_is_u8, tile_n) +
                      raw_stages * raw_stage_bytes(b_is_u8, tile_n) >
                  accumulator_tile_bytes(tile_n)
              ? kDeepPlaneSlots * deep_stage_bytes(b_is_u8, tile_n) +
                    raw_stages * raw_stage_bytes(b_is_u8, tile_n)
              : accumulator_tile_bytes(tile_n)) +
         kAlignSlack;
}
// The opt-in limit per block covers static shared memory too (commit_block_stats' 1.5 KB).
inline constexpr int kSmemLimit = 227 * 1024 - 2048;
__host__ __device__ constexpr int deep_max_raw_stages(bool b_is_u8, int tile_n = kWgmmaTileN) {
  return (kSmemLimit - kAlignSlack - kDeepPlaneSlots * deep_stage_bytes(b_is_u8, tile_n)) /
         raw_stage_bytes(b_is_u8, tile_n);
}
static_assert(deep_max_raw_stages(false) >= 4 && deep_max_raw_stages(true) >= 6 &&
                  deep_max_raw_stages(true, kWideTileN) >= 4,
              "the default ring depths must fit");
static_assert(deep_smem_bytes(false, deep_max_raw_stages(false)) <= kSmemLimit &&
                  deep_smem_bytes(true, deep_max_raw_stages(true)) <= kSmemLimit &&
                  deep_smem_bytes(true, deep_max_raw_stages(true, kWideTileN), kWideTileN) <=
                      kSmemLimit,
              "over the sm_90 shared-memory limit per block");

// The shared address of the dynamic shared memory's first 1024-byte boundary (where the rings
// start: the swizzles repeat every 1024 bytes).
__device__ __forceinline__ uint32_t aligned_shared_address(const unsigned char* smem_raw) {
  const uint32_t raw_address = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  return raw_address + ((1024u - (raw_address & 1023u)) & 1023u);
}

__device__ __forceinline__ int clamp_valid(int valid, int most) {
  return valid < 0 ? 0 : valid > most ? most : valid;
}
__device__ __forceinline__ uint32_t raw_kcontig_s16_offset(int row, int chunk) {
  const int f = 2 * (row & 3) + (row & 1);
  return row * 128 + 16 * (chunk ^ f);
}
__device__ __forceinline__ uint32_t raw_rowcontig_offset(int k, int chunk, int pitch) {
  return k * pitch + 16 * (chunk ^ ((k & 1) | ((k >> 3) & 6)));
}
// The first of the four k-rows an int16 row-contiguous copy thread takes (u = thread / 16): the
// 16 values 16·(u / 4) + 8·(u / 2 % 2) + u % 2, each followed by +2, +4, +6, tile the 64 k-rows.
__device__ __forceinline__ int rowcontig_s16_first_k(int u) {
  return 16 * (u >> 2) + 8 * ((u >> 1) & 1) + (u & 1);
}
inline constexpr int kRowContigS16KStep = 2;  // k-rows between one copy thread's chunks
// Row-contiguous u8 with kRows rows per k-row: with 192 (12 chunks) the last four chunks are
// swizzled among themselves only, so that every chunk stays inside the row.
template <int kRows>
__device__ __forceinline__ uint32_t raw_u8_rowcontig_offset(int k, int chunk) {
  const int key = (k >> 2) & (kRows == 128 || chunk < 8 ? 7 : 3);
  return k * kRows + 16 * (chunk ^ key);
}

// The wgmma descriptors of a stage's planes in plane slot 0, for this thread's warpgroup (its 64
// rows of A): low words, advanced per stage and k step by adding (byte offset >> 4), and the high
// word, the same for all. Addresses stay below 2^18, so the 14-bit start-address field never
// carries into the leading-offset field.
struct PlaneDescriptors {
  uint32_t hi;
  uint32_t a_hi, a_lo, b_hi, b_lo;

  // smem_address: the shared address of plane slot 0; the planes' byte offsets in a slot.
  __device__ __forceinline__ void init(uint32_t smem_address, uint32_t a_hi_bytes,
                                       uint32_t a_lo_bytes, uint32_t b_hi_bytes,
                                       uint32_t b_lo_bytes) {
    const int warpgroup = threadIdx.x >> 7;
    const uint32_t a_rows_offset = warpgroup * 64 * wgmma::kRowBytes;
    const uint64_t desc0 = wgmma::descriptor(smem_address);
    hi = static_cast<uint32_t>(desc0 >> 32);
    const uint32_t lo = static_cast<uint32_t>(desc0);
    a_hi = lo + ((a_hi_bytes + a_rows_offset) >> 4);
    a_lo = lo + ((a_lo_bytes + a_rows_offset) >> 4);
    b_hi = lo + (b_hi_bytes >> 4);
    b_lo = lo + (b_lo_bytes >> 4);
  }
  // The descriptor whose low word is `lo`.
  __device__ __forceinline__ uint64_t operator()(uint32_t lo) const {
    return uint64_t(lo) | (uint64_t(hi) << 32);
  }
};

// One stage's wgmmas from the planes of the plane slot at byte offset 16 · `slot` (both 32-deep
// k steps): a u8 B's two products (hₐ·b, lₐ·b), or an int16 B's byte products.
template <bool kBIsU8, int kTileN>
__device__ __forceinline__ void plane_stage_wgmmas(const PlaneDescriptors& desc, uint32_t slot,
                                                   uint32_t (&acc_hi)[kTileN / 2],
                                                   uint32_t (&acc_mid)[kTileN / 2],
                                                   uint32_t (&acc_lo)[kTileN / 2]) {
#pragma unroll
  for (int ks = 0; ks < kWgmmaStageK / 32; ++ks) {
    const uint32_t step = slot + 2 * ks;  // 32 bytes along the 64-byte row, >> 4
    const uint64_t a_hi = desc(desc.a_hi + step);
    const uint64_t a_lo = desc(desc.a_lo + step);
    const uint64_t b_hi = desc(desc.b_hi + step);
    if constexpr (kBIsU8 && kTileN == kWideTileN) {
      wgmma::wgmma_m64n192k32_s8u8(acc_hi, a_hi, b_hi);
      wgmma::wgmma_m64n192k32_u8u8(acc_lo, a_lo, b_hi);
    } else if constexpr (kBIsU8) {
      wgmma::wgmma_m64n128k32_s8u8(acc_hi, a_hi, b_hi);
      wgmma::wgmma_m64n128k32_u8u8(acc_lo, a_lo, b_hi);
    } else {
      wgmma::byte_products<false>(acc_hi, acc_mid, acc_lo, a_hi, a_lo, b_hi,
                                  desc(desc.b_lo + step));
    }
  }
}

}  // namespace wgmma_detail
}  // namespace flexkit::backend::cuda::gemm_kernels
