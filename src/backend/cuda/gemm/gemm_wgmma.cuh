// The sm_90a exact integer GEMM kernel (the shared-memory "SS" form).
//
// Each int16 mantissa m is split in registers into a signed high byte h = m >> 8 and an unsigned
// low byte l = m & 0xff (m = 256·h + l), so a·b = 65536·hₐh_b + 256·(hₐl_b + lₐh_b) + lₐl_b:
// three int32 accumulators per output (hh: s8×s8; cross: s8×u8 and u8×s8 into the same registers;
// ll: u8×u8), combined exactly in int64 at the end. For a u8 B there are two: hₐ·b and lₐ·b.
//
// Data path (every int16 element of A and B is read from global memory once per CTA):
//   global int16 → cp.async into a raw ring in shared memory (see "The raw ring" below) →
//   registers → byte permutes → st.shared into K-major byte planes (64-byte swizzle, the layout
//   wgmma's 8-bit operands need) → fence.proxy.async + barrier → wgmma reads both operands from
//   shared memory.
// An operand whose unit stride runs along M or N is transposed on the way: an int16 one by
// ldmatrix.trans (LeanS16RowContigSplit), a u8 one by the permutes (4 k-rows × 8 rows per thread
// become 8 runs of 4 k-bytes).
//
// No warp specialisation: the split needs registers, and the accumulators already take 3 · 64
// of them per thread: 256 threads = 2 warpgroups, each owning 64 rows × 128 columns of the CTA
// tile. The raw ring keeps several stages of loads in flight, which is what covers ~1 µs of
// L2/HBM latency at tensor-core rate; gemm_wgmma_lean_kernel (see "The lean deep kernel") keeps
// the per-stage instruction count low and software-pipelines the split (raw reads well ahead of
// their permutes).
#pragma once
#include <cstdint>
#include <type_traits>

#include "backend/cuda/check.hpp"
#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/gemm/gemm_kernel_args.cuh"
#include "backend/cuda/gemm/gemm_wgmma.hpp"
#include "backend/cuda/gemm/sm90_kernel_image.hpp"
#include "backend/cuda/gemm/wgmma_int8.cuh"
#include "flexkit/portable/stream_k.hpp"

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

__device__ __forceinline__ void store_shared(unsigned char* plane, uint32_t offset, uint4 v) {
  *reinterpret_cast<uint4*>(plane + wgmma::swizzle(offset)) = v;
}
__device__ __forceinline__ void store_shared(unsigned char* plane, uint32_t offset, uint32_t v) {
  *reinterpret_cast<uint32_t*>(plane + wgmma::swizzle(offset)) = v;
}

// ---------------------------------------------------------------------------------------------
// The raw ring (the "deep" kernels): whole stages of the operands exactly as they are in global
// memory (int16 or u8, not yet split), copied by cp.async straight into shared memory. Nothing
// passes through registers, so every thread keeps 4 (int16) or 2 (u8) 16-byte copies per
// operand and stage in flight, for as many stages as the ring has slots: that is what feeds the
// tensor cores across the ~1 µs load latency. The splitters then read the raw tile back from
// shared memory and split it into the planes.
//
// Raw tile layouts and their 16-byte chunk swizzles (chosen so that the split loaders' reads,
// the RS kernel's fragment reads and the copies are all free of bank conflicts):
//   k-contiguous int16:  128 rows × 128 bytes; chunk c of row r at r·128 + 16·(c ^ f(r)) with
//                        f(r) = 2·(r % 4) + (r % 2) (0, 3, 4, 7): rows 2q and 2q+1 differ in bit 0
//                        (the split loader reads rows pairwise), four consecutive rows differ in
//                        bits 1-2 (the RS fragment reads take two adjacent chunks of four rows).
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
// A u8 B may use a wider N tile (FLEXKIT_GEMM_TILE_N=192): its two accumulators then take
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
// The ring depth is a run-time value (FLEXKIT_GEMM_STAGES); the instruction wants an immediate.
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

// Copies of one stage (`tile` at row 0, k 0 of the stage) into the raw slot at shared address
// `raw`; consecutive threads take consecutive 16-byte chunks along the unit stride (coalesced).
__device__ __forceinline__ void copy_s16_kcontig(uint32_t raw, const int16_t* tile, int64_t ld,
                                                 int rows_valid, int k_valid) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int c = threadIdx.x + kWgmmaThreads * j;
    const int row = c >> 3, chunk = c & 7;
    const int valid = row < rows_valid ? clamp_valid(k_valid - 8 * chunk, 8) : 0;
    const int16_t* src = valid > 0 ? tile + row * ld + 8 * chunk : tile;
    cp_async_16(raw + raw_kcontig_s16_offset(row, chunk), src, 2 * valid);
  }
}
__device__ __forceinline__ void copy_s16_rowcontig(uint32_t raw, const int16_t* tile, int64_t ld,
                                                   int rows_valid, int k_valid) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int c = threadIdx.x + kWgmmaThreads * j;
    const int k = c >> 4, chunk = c & 15;
    const int valid = k < k_valid ? clamp_valid(rows_valid - 8 * chunk, 8) : 0;
    const int16_t* src = valid > 0 ? tile + k * ld + 8 * chunk : tile;
    cp_async_16(raw + raw_rowcontig_offset(k, chunk, 256), src, 2 * valid);
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
      copy_s16_kcontig(raw, tile, ld, rows_valid, k_valid);
    } else {
      copy_s16_rowcontig(raw, tile, ld, rows_valid, k_valid);
    }
  } else if constexpr (kKContig) {
    copy_u8_kcontig<kRows>(raw, tile, ld, rows_valid, k_valid);
  } else {
    copy_u8_rowcontig<kRows>(raw, tile, ld, rows_valid, k_valid);
  }
}

template <typename T>
__device__ __forceinline__ T load_raw_vector(const unsigned char* raw, uint32_t offset) {
  return *reinterpret_cast<const T*>(raw + offset);
}

// Loaders (the RS kernel's B): `load_raw` brings this thread's share of one stage (128 rows × 64 k
// of the operand) from its raw slot into registers; `store` splits it and writes it into the
// stage's planes.

// int16, unit stride along K: a thread owns 16 consecutive k of rows tid/4 and tid/4 + 64
// (4 threads cover one 128-byte row segment: coalesced). High bytes of 16 k form one 16-byte
// store; a quarter-warp writes two whole 64-byte rows: no bank conflict.
struct S16KContig {
  uint4 v[2][2];

  __device__ __forceinline__ void load_raw(const unsigned char* raw) {
    const int chunk = threadIdx.x & 3;
#pragma unroll
    for (int it = 0; it < 2; ++it) {
      const int row = (threadIdx.x >> 2) + 64 * it;
#pragma unroll
      for (int h = 0; h < 2; ++h)
        v[it][h] = load_raw_vector<uint4>(raw, raw_kcontig_s16_offset(row, 2 * chunk + h));
    }
  }

  __device__ __forceinline__ void store(unsigned char* hi_plane, unsigned char* lo_plane) const {
    const int chunk = threadIdx.x & 3;
#pragma unroll
    for (int it = 0; it < 2; ++it) {
      const int row = (threadIdx.x >> 2) + 64 * it;
      // Word q holds k = 2q (bytes 0 lo, 1 hi) and k = 2q + 1 (bytes 2 lo, 3 hi).
      const uint32_t w[8] = {v[it][0].x, v[it][0].y, v[it][0].z, v[it][0].w,
                             v[it][1].x, v[it][1].y, v[it][1].z, v[it][1].w};
      uint4 hi, lo;
      hi.x = __byte_perm(w[0], w[1], 0x7531);
      hi.y = __byte_perm(w[2], w[3], 0x7531);
      hi.z = __byte_perm(w[4], w[5], 0x7531);
      hi.w = __byte_perm(w[6], w[7], 0x7531);
      lo.x = __byte_perm(w[0], w[1], 0x6420);
      lo.y = __byte_perm(w[2], w[3], 0x6420);
      lo.z = __byte_perm(w[4], w[5], 0x6420);
      lo.w = __byte_perm(w[6], w[7], 0x6420);
      const uint32_t offset = row * wgmma::kRowBytes + 16 * chunk;
      store_shared(hi_plane, offset, hi);
      store_shared(lo_plane, offset, lo);
    }
  }
};

// Row mapping shared by the transposing u8 loaders: a warp covers two groups of 8 rows × all 64 k;
// lane % 16 picks a run of 4 k (one 32-bit word of a plane row), lane / 16 the row group.
// When storing, the upper half-warp walks its 8 rows in the order j ^ 1 so that the two
// half-warps always write rows of opposite parity, i.e. opposite halves of the banks.
__device__ __forceinline__ int transpose_group() {
  return 2 * (threadIdx.x >> 5) + ((threadIdx.x >> 4) & 1);
}
__device__ __forceinline__ int transpose_kword() {
  return threadIdx.x & 15;
}
__device__ __forceinline__ int transpose_flip() {
  return (threadIdx.x >> 4) & 1;
}

// u8, unit stride along K: bytes go to the plane unchanged, 16 k per thread and row (kRows / 64
// rows per thread).
template <int kRows = kWgmmaTileN>
struct U8KContigT {
  static constexpr int kPasses = kRows / 64;
  uint4 v[kPasses];

  __device__ __forceinline__ void load_raw(const unsigned char* raw) {
    const int chunk = threadIdx.x & 3;
#pragma unroll
    for (int it = 0; it < kPasses; ++it) {
      const int row = (threadIdx.x >> 2) + 64 * it;
      v[it] = load_raw_vector<uint4>(raw, row * 64 + 16 * chunk);
    }
  }

  __device__ __forceinline__ void store(unsigned char* plane) const {
    const int chunk = threadIdx.x & 3;
#pragma unroll
    for (int it = 0; it < kPasses; ++it) {
      const int row = (threadIdx.x >> 2) + 64 * it;
      store_shared(plane, row * wgmma::kRowBytes + 16 * chunk, v[it]);
    }
  }
};
using U8KContig = U8KContigT<>;

// u8, unit stride along N: 4 k-rows × 8 bytes per thread, a 4 × 4 byte transpose twice.
struct U8RowContig {
  uint2 v[4];

  // kRows: rows of the raw tile (its k-row pitch); group_offset: a second pass over rows
  // 128 + … of a wider tile (the same thread mapping, groups 16 + …).
  template <int kRows = kWgmmaTileN>
  __device__ __forceinline__ void load_raw(const unsigned char* raw, int group_offset = 0) {
    const int group = transpose_group() + group_offset;
    const int kw = transpose_kword();
#pragma unroll
    for (int i = 0; i < 4; ++i)
      v[i] = load_raw_vector<uint2>(
          raw, raw_u8_rowcontig_offset<kRows>(4 * kw + i, group >> 1) + 8 * (group & 1));
  }

  __device__ __forceinline__ void store(unsigned char* plane, int group_offset = 0) const {
    const int group = transpose_group() + group_offset;
    const int kw = transpose_kword();
    const int flip = transpose_flip();
    const uint32_t w[4][2] = {
        {v[0].x, v[0].y}, {v[1].x, v[1].y}, {v[2].x, v[2].y}, {v[3].x, v[3].y}};
    uint32_t out[8];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // Byte r of word h of k-row i is row 4h + r.
      const uint32_t p01 = __byte_perm(w[0][h], w[1][h], 0x5140);  // rows 0, 1 of k0, k1
      const uint32_t p23 = __byte_perm(w[2][h], w[3][h], 0x5140);
      const uint32_t q01 = __byte_perm(w[0][h], w[1][h], 0x7362);  // rows 2, 3 of k0, k1
      const uint32_t q23 = __byte_perm(w[2][h], w[3][h], 0x7362);
      out[4 * h + 0] = __byte_perm(p01, p23, 0x5410);
      out[4 * h + 1] = __byte_perm(p01, p23, 0x7632);
      out[4 * h + 2] = __byte_perm(q01, q23, 0x5410);
      out[4 * h + 3] = __byte_perm(q01, q23, 0x7632);
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int row = 8 * group + (j ^ flip);
      store_shared(plane, row * wgmma::kRowBytes + 4 * kw, flip ? out[j ^ 1] : out[j]);
    }
  }
};

// Tiles in groups of 8 tile-rows walked column by column, so CTAs running together share
// A and B panels in L2.
__device__ __forceinline__ void grouped_tile(int64_t tile, int64_t tiles_m, int64_t tiles_n,
                                             int64_t& tile_m, int64_t& tile_n) {
  constexpr int64_t kGroup = 8;
  if (tiles_n < (int64_t(1) << 28)) {  // 32-bit division: a tenth of the 64-bit routine
    const uint32_t per_group = uint32_t(kGroup) * uint32_t(tiles_n);
    const uint32_t group = uint32_t(tile) / per_group;
    const uint32_t first_m = group * uint32_t(kGroup);
    const uint32_t left = uint32_t(tiles_m) - first_m;
    const uint32_t group_m = left < uint32_t(kGroup) ? left : uint32_t(kGroup);
    const uint32_t in_group = uint32_t(tile) - group * per_group;
    tile_m = first_m + in_group % group_m;
    tile_n = in_group / group_m;
    return;
  }
  const int64_t per_group = kGroup * tiles_n;
  const int64_t group = tile / per_group;
  const int64_t first_m = group * kGroup;
  const int64_t group_m = tiles_m - first_m < kGroup ? tiles_m - first_m : kGroup;
  const int64_t in_group = tile - group * per_group;
  tile_m = first_m + in_group % group_m;
  tile_n = in_group / group_m;
}

// `v`, as a value the compiler cannot see through (so cannot reuse what it computed from it).
__device__ __forceinline__ int opaque_int(int v) {
  int r;
  asm volatile("mov.b32 %0, %1;" : "=r"(r) : "r"(v));
  return r;
}

// One piece of a CTA's work: stages [k_begin, k_end) of one output tile, finished in place
// (partial == nullptr) or added into the tile's int64 slice of the stream-K workspace.
struct WorkItem {
  int64_t batch, tile_m, tile_n;
  int64_t k_begin, k_end;
  unsigned long long* partial;
};
inline constexpr int kStreamKSliceElements = kWgmmaTileM * kWgmmaTileN;

// Tile number t (batch-major, see IntegerGemmArgs::sk_ctas) as batch entry and grouped position.
__device__ __forceinline__ void decode_tile(const IntegerGemmArgs& p, int64_t t, WorkItem& w) {
  const int64_t tiles_mn = int64_t(p.tiles_m) * p.tiles_n;
  const int64_t b = t / tiles_mn;
  w.batch = p.batch_offset + b;
  grouped_tile(t - b * tiles_mn, p.tiles_m, p.tiles_n, w.tile_m, w.tile_n);
}

// This CTA's work item number `index` (0, 1, …); false past its last one. Without stream-K the
// only item is the grid's: tile blockIdx.x of batch entry blockIdx.z, K split blockIdx.y.
// Stream-K items are computed from the index alone, so nothing of the schedule stays live across
// a tile's main loop.
__device__ __forceinline__ void grid_item(const IntegerGemmArgs& p, WorkItem& w) {
  w.partial = nullptr;
  w.batch = p.batch_offset + blockIdx.z;
  grouped_tile(blockIdx.x, p.tiles_m, p.tiles_n, w.tile_m, w.tile_n);
  w.k_begin = int64_t(blockIdx.y) * p.k_chunk;
  w.k_end = p.k < w.k_begin + p.k_chunk ? p.k : w.k_begin + p.k_chunk;
}
__device__ __forceinline__ bool stream_k_item(const IntegerGemmArgs& p, int index, WorkItem& w) {
  if (p.sk_ctas == 0) {
    if (index > 0) return false;
    grid_item(p, w);
    return true;
  }
  w.partial = nullptr;
  const int64_t ctas = gridDim.x;
  const int64_t whole_rounds = p.sk_first_tile / ctas;
  if (index < whole_rounds) {
    decode_tile(p, index * ctas + blockIdx.x, w);
    w.k_begin = 0;
    w.k_end = p.k;
    return true;
  }
  const int64_t stages = (p.k + kWgmmaStageK - 1) / kWgmmaStageK;
  portable::StreamKPart part;
  if (!portable::stream_k_part(p.sk_tiles - p.sk_first_tile, stages, p.sk_ctas, blockIdx.x,
                               index - whole_rounds, part))
    return false;
  decode_tile(p, p.sk_first_tile + part.tile, w);
  w.k_begin = part.first_stage * kWgmmaStageK;
  const int64_t k_end = part.end_stage * kWgmmaStageK;
  w.k_end = k_end < p.k ? k_end : p.k;
  w.partial = p.workspace +
              (int64_t(blockIdx.x) * p.sk_parts + index - whole_rounds) * kStreamKSliceElements;
  return true;
}

// The end of a CTA (both kernels): waits for the last wgmmas, combines the byte-product
// accumulators exactly in int64, parks them in shared memory (reusing the operand ring) and
// finishes every output element of the tile, or adds it to the split-K workspace.
template <bool kBIsU8, int kTileN = kWgmmaTileN>
__device__ __forceinline__ void finish_tile(const IntegerGemmArgs& p, unsigned char* smem,
                                            uint32_t (&acc_hi)[kTileN / 2],
                                            uint32_t (&acc_mid)[kTileN / 2],
                                            uint32_t (&acc_lo)[kTileN / 2], int64_t batch,
                                            int64_t row0, int64_t col0, int rows_a, int rows_b,
                                            unsigned long long* partial = nullptr) {
  constexpr int kPitch = kTileN + 1;  // kTilePitch for the tile's width
  wgmma::wait_group<0>();
  wgmma::pin_registers(acc_hi);
  if constexpr (!kBIsU8) wgmma::pin_registers(acc_mid);
  wgmma::pin_registers(acc_lo);
  const int warpgroup = threadIdx.x >> 7;
  auto combined = [&](int i) {
    if constexpr (kBIsU8) return int64_t(int32_t(acc_hi[i])) * 256 + int64_t(int32_t(acc_lo[i]));
    return int64_t(int32_t(acc_hi[i])) * 65536 + int64_t(int32_t(acc_mid[i])) * 256 +
           int64_t(int32_t(acc_lo[i]));
  };

  // The common store (a whole tile, flex16 out, alpha 1, beta 0, a right shift): straight from
  // the accumulator registers with the branch-free rounding, two adjacent columns per 32-bit
  // store where the output allows. The general path below parks the tile in shared memory and
  // runs the full epilogue per element, ~8 000 instructions per thread for a 128-wide tile,
  // which cost as much as an 18-stage main loop (small-K GEMMs and convolutions).
  const portable::GemmEpilogue& e = p.epilogue;
  if (partial == nullptr && p.splits <= 1 && !p.out_is_f32 && !p.measure && e.integer_only &&
      e.scale >= 1 && e.scale <= 62 && p.k < (int64_t(1) << 32) && rows_a == kWgmmaTileM &&
      rows_b == kTileN) {
    const int warp_in_group = (threadIdx.x >> 5) & 3;
    const int lane = threadIdx.x & 31;
    const int64_t rs = p.c.row_stride, cs = p.c.col_stride;
    const int row = 64 * warpgroup + 16 * warp_in_group + (lane >> 2);
    int16_t* const tile_out =
        static_cast<int16_t*>(p.c.data) + batch * p.c.batch_stride + row0 * rs + col0 * cs;
    int16_t* const out0 = tile_out + row * rs + 2 * (lane & 3) * cs;
    int16_t* const out1 = out0 + 8 * rs;
    const bool pairs = cs == 1 && (rs & 1) == 0 && (reinterpret_cast<uintptr_t>(out0) & 3) == 0;
    portable::GemmStats stats = portable::gemm_stats_identity();
    auto record = [&](portable::Flex16Code c) {
      const int32_t a = c.m < 0 ? -int32_t(c.m) : int32_t(c.m);
      stats.max_abs_m = a > stats.max_abs_m ? a : stats.max_abs_m;
      stats.saturated += c.saturated ? 1 : 0;
    };
#pragma unroll
    for (int j = 0; j < kTileN / 8; ++j) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        // Accumulators 4j + 2r and 4j + 2r + 1: row + 8r, columns 8j + 2·(lane % 4) + {0, 1}.
        const portable::Flex16Code c0 =
            portable::gemm_round_shift_right(combined(4 * j + 2 * r), e.scale);
        const portable::Flex16Code c1 =
            portable::gemm_round_shift_right(combined(4 * j + 2 * r + 1), e.scale);
        record(c0);
        record(c1);
        int16_t* const o = (r ? out1 : out0) + 8 * j * cs;
        if (pairs) {
          *reinterpret_cast<uint32_t*>(o) =
              uint32_t(uint16_t(c0.m)) | (uint32_t(uint16_t(c1.m)) << 16);
        } else {
          o[0] = c0.m;
          o[cs] = c1.m;
        }
      }
    }
    commit_block_stats(stats, p.stats);
    return;
  }
  // A whole tile's partial sums of a K split, likewise straight from the registers.
  if (p.splits > 1 && rows_a == kWgmmaTileM && rows_b == kTileN) {
    const int warp_in_group = (threadIdx.x >> 5) & 3;
    const int lane = threadIdx.x & 31;
    const int row = 64 * warpgroup + 16 * warp_in_group + (lane >> 2);
    unsigned long long* const at0 =
        p.workspace + split_index(p, batch, row0 + row, col0 + 2 * (lane & 3));
    const int64_t col_step = rows_are_unit_stride(p.c) ? p.m : 1;
    unsigned long long* const at1 = at0 + 8 * (col_step == 1 ? p.n : 1);
#pragma unroll
    for (int i = 0; i < kTileN / 2; ++i) {
      const int64_t acc = combined(i);
      unsigned long long* const at =
          ((i >> 1) & 1 ? at1 : at0) + (8 * (i >> 2) + (i & 1)) * col_step;
      if (acc != 0) atomicAdd(at, static_cast<unsigned long long>(acc));
    }
    return;
  }

  // A whole stream-K part likewise: its exact sums straight into its slot, in the slot's order
  // (row-major, or column-major where the output's rows are unit stride: see below). Measured on
  // the H200 against parking the part through shared memory (the general path below): 3x3 C256
  // 14x14 update 0.100 → 0.090 ms, C512 7x7 0.101 → 0.096 ms per call.
  if (partial != nullptr && rows_a == kWgmmaTileM && rows_b == kTileN) {
    const int warp_in_group = (threadIdx.x >> 5) & 3;
    const int lane = threadIdx.x & 31;
    const int row = 64 * warpgroup + 16 * warp_in_group + (lane >> 2);
    const bool columns_fastest = !rows_are_unit_stride(p.c);
#pragma unroll
    for (int i = 0; i < kTileN / 2; i += 2) {
      // Accumulators i and i + 1: row + 8 ((i / 2) % 2), columns c and c + 1.
      const int r = row + 8 * ((i >> 1) & 1);
      const int c = 8 * (i >> 2) + 2 * (lane & 3);
      const auto first = static_cast<unsigned long long>(combined(i));
      const auto second = static_cast<unsigned long long>(combined(i + 1));
      if (columns_fastest) {
        *reinterpret_cast<ulonglong2*>(partial + r * kTileN + c) = make_ulonglong2(first, second);
      } else {
        partial[c * kWgmmaTileM + r] = first;
        partial[(c + 1) * kWgmmaTileM + r] = second;
      }
    }
    return;
  }

  // Both warpgroups' last wgmmas have read the ring before it becomes the accumulator tile.
  __syncthreads();

  int64_t* const tile = reinterpret_cast<int64_t*>(smem);
  {
    const int warp_in_group = (threadIdx.x >> 5) & 3;
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < kTileN / 2; ++i) {
      const int row = 64 * warpgroup + 16 * warp_in_group + (lane >> 2) + 8 * ((i >> 1) & 1);
      const int col = 8 * (i >> 2) + 2 * (lane & 3) + (i & 1);
      tile[row * kPitch + col] = combined(i);
    }
  }
  __syncthreads();

  // One pass over the tile with consecutive threads along the output's unit stride; a K split's
  // workspace (split_index) and a stream-K part's slot (gemm_finish_stream_k_kernel) follow the
  // output's layout, so their atomics and stores are consecutive too. Walking rows fastest, a
  // tile with at most 64 valid rows (m = 64) is walked in 64-row lines, so no thread idles on
  // the half outside.
  const bool split = p.splits > 1;
  const bool columns_fastest = !rows_are_unit_stride(p.c);
  const int line_shift = rows_a <= 64 ? 6 : 7;  // log2 of the rows-fastest line
  const int extent = columns_fastest ? kWgmmaTileM * kTileN : kTileN << line_shift;
  portable::GemmStats stats = portable::gemm_stats_identity();
#pragma unroll 1
  for (int index = threadIdx.x; index < extent; index += kWgmmaThreads) {
    const int r = columns_fastest ? index / kTileN : index & ((1 << line_shift) - 1);
    const int c = columns_fastest ? index % kTileN : index >> line_shift;
    if (r >= rows_a || c >= rows_b) continue;
    const int64_t acc = tile[r * kPitch + c];
    if (partial != nullptr) {
      // A stream-K part: its exact sums into its own slot (plain stores, every element inside
      // the matrix; the slot is not cleared beforehand and the finish reads only those), in the
      // order of this pass: row-major, or column-major where the output's rows are unit stride.
      partial[columns_fastest ? r * kTileN + c : c * kWgmmaTileM + r] =
          static_cast<unsigned long long>(acc);
    } else if (split) {
      add_partial(p, batch, row0 + r, col0 + c, acc);
    } else {
      finish_element(p, batch, row0 + r, col0 + c, acc, stats);
    }
  }
  if (!split && partial == nullptr) commit_block_stats(stats, p.stats);
}

// ---------------------------------------------------------------------------------------------
// The lean deep kernel (the default "ss"): the raw-ring pipeline with the per-stage instruction
// stream cut down. Measured on the H200, a first, plainer deep kernel spent ~690 warp
// instructions per 64-deep stage (3 300 cycles of issue against 1 024 tensor-core cycles): every
// stage recomputed each copy's 64-bit source address, its bound clamps and its swizzled
// destination, and divided by the run-time ring depth twice. Here:
//   - copies of interior tiles and full stages (all but edge CTAs and the K tail) take a path
//     with no guards: the per-thread source pointer and shared offsets are computed once per
//     CTA, and each stage only adds the k step and the slot; the guarded copies above run only
//     where an operand tile crosses the matrix edge or the stage is the K tail;
//   - ring slots are running byte offsets (no `%` by the ring depth);
//   - the wgmma descriptors are built once and advanced by adding constants;
//   - the u8 transposing split's half-warp row flip is folded into the permute selectors (run-time
//     selectors cost nothing per stage) instead of 16 selects.

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

// ---------------------------------------------------------------------------------------------
// Implicit GEMM (convolutions, see ConvGather): B is gathered straight from the activations by
// the same cp.async copies, in the n-contiguous raw layout (copy_s16_rowcontig /
// copy_u8_rowcontig's thread mapping). A thread's column chunk (8 int16 or 16 u8 consecutive n of
// one position) is the same in every stage, so its position is decoded once per CTA; a stage only
// adds its tap's offsets, checks the tap's coordinates against the operand's extents (the zero
// padding: copies of 0 source bytes fill zeros) and issues the chunks of its k-rows, one channel
// each. Needs n contiguous with batch a multiple of the chunk, 16-byte aligned rows.

// The uniform walk over (tap, channel block) stages, advanced once per issued stage. The
// stage's offsets into A and into the gathered operand are recomputed from it each stage (uniform
// arithmetic): carrying them as state instead made ptxas spill next to the 3 · 64 accumulators.
struct TapWalk {
  int block;         // channel block within the tap
  int t[3];          // the tap
  int64_t b_offset;  // Σ_d t_d·tap_step_d·in_stride_d + 64 · block · channel_stride
  int64_t a_offset;  // A's offset (elements) of the stage's first k

  // stage < 2^31 (the host checks), so 32-bit divisions.
  __device__ __forceinline__ void init(const ConvGather& g, int64_t stage) {
    const uint32_t s = static_cast<uint32_t>(stage);
    block = static_cast<int>(s % uint32_t(g.channel_stages));
    uint32_t tap = s / uint32_t(g.channel_stages);
    t[2] = static_cast<int>(tap % uint32_t(g.taps[2]));
    tap /= uint32_t(g.taps[2]);
    t[1] = static_cast<int>(tap % uint32_t(g.taps[1]));
    t[0] = static_cast<int>(tap / uint32_t(g.taps[1]));
    refresh(g);
  }
  // The offsets from the tap and block (at a tap change; within a tap they only add a step).
  __device__ __forceinline__ void refresh(const ConvGather& g) {
    b_offset = block * g.b_block_step;
    a_offset = block * g.a_block_step;
#pragma unroll
    for (int d = 0; d < 3; ++d) {
      b_offset += int64_t(disp(g, d)) * g.in_stride[d];
      a_offset += t[d] * g.a_tap_stride[d];
    }
  }
  __device__ __forceinline__ void advance(const ConvGather& g) {
    if (++block < g.channel_stages) {
      b_offset += g.b_block_step;
      a_offset += g.a_block_step;
      return;
    }
    block = 0;
    if (++t[2] == g.taps[2]) {
      t[2] = 0;
      if (++t[1] == g.taps[1]) {
        t[1] = 0;
        ++t[0];
      }
    }
    refresh(g);
  }
  // Channels of this stage that exist (the last block of a tap may be partial).
  __device__ __forceinline__ int channels(const ConvGather& g) const {
    const int left = g.channels - kWgmmaStageK * block;
    return left < kWgmmaStageK ? left : kWgmmaStageK;
  }
  __device__ __forceinline__ int disp(const ConvGather& g, int d) const {
    return t[d] * g.tap_step[d];
  }
};

// Column index → (position (o0, o1, o2), n) over `out` × `batch`: 32-bit divisions where the
// index fits (the 64-bit routine is ten times longer and runs once per thread and CTA).
__device__ __forceinline__ void split_column(const ConvGather& g, int64_t col, int64_t (&o)[3],
                                             int64_t& n) {
  if (col <= INT32_MAX) {
    const uint32_t c = static_cast<uint32_t>(col);
    const uint32_t position = c / uint32_t(g.batch);
    n = c - position * uint32_t(g.batch);
    o[2] = position % uint32_t(g.out[2]);
    const uint32_t rest = position / uint32_t(g.out[2]);
    o[1] = rest % uint32_t(g.out[1]);
    o[0] = rest / uint32_t(g.out[1]);
    return;
  }
  const int64_t position = col / g.batch;
  n = col - position * g.batch;
  o[2] = position % g.out[2];
  o[1] = (position / g.out[2]) % g.out[1];
  o[0] = position / (int64_t(g.out[2]) * g.out[1]);
}

template <typename Element>
struct GatherCopy {
  static constexpr bool kS16 = sizeof(Element) == 2;
  static constexpr int kChunks = kS16 ? 4 : 2;  // per thread and stage
  static constexpr int kChunkElements = 16 / int(sizeof(Element));
  static constexpr int kRowStep = kS16 ? kRowContigS16KStep : 32;  // k-rows between chunks
  int32_t x0[3];        // o_d·out_step_d + base_d of this thread's position
  int64_t base_offset;  // elements: n0 + first k-row · channel_stride + Σ_d x0_d · in_stride_d
  int32_t k_first;      // the thread's first k-row
  uint32_t dst0;        // its slot offset
  bool column_ok;       // the chunk lies inside the GEMM's columns

  // This thread's chunk of column tile col0: its first column.
  static __device__ __forceinline__ int64_t chunk_column(int64_t col0) {
    const int chunk = kS16 ? (threadIdx.x & 15) : (threadIdx.x & 7);
    return col0 + int64_t(kChunkElements) * chunk;
  }

  __device__ __forceinline__ void init(const ConvGather& g, int64_t col0, int64_t columns) {
    const int64_t col = chunk_column(col0);
    int64_t o[3], n0;
    split_column(g, col, o, n0);
    init_at(g, col, o, n0, columns);
  }

  // The same from the column's decoded position (o, n0), e.g. carried from an earlier tile.
  __device__ __forceinline__ void init_at(const ConvGather& g, int64_t col, const int64_t (&o)[3],
                                          int64_t n0, int64_t columns) {
    const int t = threadIdx.x;
    const int chunk = kS16 ? (t & 15) : (t & 7);
    k_first = kS16 ? rowcontig_s16_first_k(t >> 4) : t >> 3;
    dst0 = kS16 ? raw_rowcontig_offset(k_first, chunk, 256)
                : raw_u8_rowcontig_offset<kWgmmaTileN>(k_first, chunk);
    column_ok = col < columns;
#pragma unroll
    for (int d = 0; d < 3; ++d) x0[d] = static_cast<int32_t>(o[d] * g.out_step[d] + g.base[d]);
    base_offset = n0 + int64_t(k_first) * g.channel_stride;
    if (!g.strided_gradient) {
#pragma unroll
      for (int d = 0; d < 3; ++d) base_offset += int64_t(x0[d]) * g.in_stride[d];
    }
  }

  // Chunk j of the thread holds k-row k_first + j·kRowStep; in the slot it sits where
  // copy_s16_rowcontig / copy_u8_rowcontig put it (the same chunk swizzle for all j).
  __device__ __forceinline__ uint32_t dst(int j) const {
    return dst0 + uint32_t(kRowStep) * (kS16 ? 256u : 128u) * j;
  }

  // Copies of 0 source bytes read nothing (they only fill zeros), so an invalid chunk's address
  // is never dereferenced and needs no clamping.
  __device__ __forceinline__ void issue(uint32_t slot, const Element* data, const ConvGather& g,
                                        const TapWalk& walk, int k_valid) const {
    bool ok = column_ok;
    const Element* src;
    if (!g.strided_gradient) {
#pragma unroll
      for (int d = 0; d < 3; ++d)
        ok = ok && static_cast<uint32_t>(x0[d] + walk.disp(g, d)) < static_cast<uint32_t>(g.in[d]);
      src = data + (base_offset + walk.b_offset);
    } else {
      // A strided convolution's gradient: o = (x + pad − t·dil) / stride only where exact.
      int64_t offset = base_offset + int64_t(kWgmmaStageK) * walk.block * g.channel_stride;
#pragma unroll
      for (int d = 0; d < 3; ++d) {
        int32_t x = x0[d] + walk.disp(g, d);
        ok = ok && x >= 0 && x % g.divisor[d] == 0;
        x /= g.divisor[d];
        ok = ok && static_cast<uint32_t>(x) < static_cast<uint32_t>(g.in[d]);
        offset += int64_t(x) * g.in_stride[d];
      }
      src = data + offset;
    }
    const int bytes = ok ? 16 : 0;
    const int64_t step = int64_t(kRowStep) * g.channel_stride;
    if (k_valid == kWgmmaStageK) {
#pragma unroll
      for (int j = 0; j < kChunks; ++j) cp_async_16(slot + dst(j), src + j * step, bytes);
    } else {
#pragma unroll
      for (int j = 0; j < kChunks; ++j)
        cp_async_16(slot + dst(j), src + j * step, k_first + kRowStep * j < k_valid ? bytes : 0);
    }
  }
};

// The update form: B k-contiguous (copy_s16_kcontig / copy_u8_kcontig's mapping), one tap per
// CTA. A thread's chunk is one run of 8 int16 (16 u8) consecutive n of one position in each of
// its rows (channels); the position moves by 64 k per stage, followed incrementally.
template <typename Element>
struct GatherKCopy {
  static constexpr bool kS16 = sizeof(Element) == 2;
  static constexpr int kChunks = kS16 ? 4 : 2;
  static constexpr int kChunkElements = 16 / int(sizeof(Element));
  static constexpr int kRowStep = kS16 ? 32 : 64;  // rows between a thread's chunks
  int32_t o[3];  // the position of this thread's chunk in the next stage
  int32_t n0;    // its first n
  int32_t left;  // k of the CTA's range from the chunk on (≤ 0: past the end)
  int32_t row_first;
  int32_t disp[3];  // base_d + t_d·tap_step_d of the CTA's tap
  uint32_t dst0;

  __device__ __forceinline__ void init(const ConvGather& g, int64_t tap, int64_t k_begin,
                                       int64_t k_len) {
    const int t = threadIdx.x;
    const int chunk = kS16 ? (t & 7) : (t & 3);
    row_first = kS16 ? t >> 3 : t >> 2;
    dst0 = kS16 ? raw_kcontig_s16_offset(row_first, chunk) : uint32_t(row_first * 64 + 16 * chunk);
    const int64_t j = k_begin + int64_t(kChunkElements) * chunk;
    left = static_cast<int32_t>(k_len - int64_t(kChunkElements) * chunk);
    int64_t position[3], n;
    split_column(g, j, position, n);
    n0 = static_cast<int32_t>(n);
#pragma unroll
    for (int d = 0; d < 3; ++d) o[d] = static_cast<int32_t>(position[d]);
    const uint32_t tap32 = static_cast<uint32_t>(tap);  // a grid z index
    const int32_t t2 = static_cast<int32_t>(tap32 % uint32_t(g.taps[2]));
    const int32_t t1 = static_cast<int32_t>((tap32 / uint32_t(g.taps[2])) % uint32_t(g.taps[1]));
    const int32_t t0 = static_cast<int32_t>(tap32 / (uint32_t(g.taps[2]) * uint32_t(g.taps[1])));
    disp[0] = g.base[0] + t0 * g.tap_step[0];
    disp[1] = g.base[1] + t1 * g.tap_step[1];
    disp[2] = g.base[2] + t2 * g.tap_step[2];
  }

  // Issues this stage's chunks (rows [row0, row0 + rows_valid) of B) and moves to the next.
  __device__ __forceinline__ void issue(uint32_t slot, const Element* rows0, const ConvGather& g,
                                        int rows_valid) {
    bool ok = left > 0;
    int64_t offset = int64_t(row_first) * g.channel_stride + n0;
#pragma unroll
    for (int d = 0; d < 3; ++d) {
      const int32_t x = o[d] * g.out_step[d] + disp[d];
      ok = ok && static_cast<uint32_t>(x) < static_cast<uint32_t>(g.in[d]);
      offset += int64_t(x) * g.in_stride[d];
    }
    const Element* src = rows0 + offset;
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
      const bool valid = ok && row_first + kRowStep * j < rows_valid;
      cp_async_16(slot + dst0 + 4096u * j,
                  valid ? src + int64_t(kRowStep) * j * g.channel_stride : rows0, valid ? 16 : 0);
    }
    // 64 k further: n, then the position, carried through the output extents.
    left -= kWgmmaStageK;
    n0 += kWgmmaStageK % g.batch;
    o[2] += kWgmmaStageK / g.batch;
    if (n0 >= g.batch) {
      n0 -= g.batch;
      ++o[2];
    }
    while (o[2] >= g.out[2]) {
      o[2] -= g.out[2];
      ++o[1];
    }
    while (o[1] >= g.out[1]) {
      o[1] -= g.out[1];
      ++o[0];
    }
  }
};

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

// S16KContig::load_raw + store by shared address: a thread's raw reads are chunks 2c and 2c + 1
// of rows r and r + 64 (the chunk swizzle f(r) is the same for both rows, and chunk 2c + 1 is
// chunk 2c with address bit 4 flipped); its plane writes are rows r and r + 64 (the same 64-byte
// swizzle phase, 4096 bytes apart). Raw slots and planes start on 1024-byte boundaries, so the
// XOR survives adding the base.
struct LeanS16KContigSplit {
  uint32_t raw_offset, plane_offset;

  __device__ __forceinline__ void init() {
    const int chunk = threadIdx.x & 3;
    const int row = threadIdx.x >> 2;
    raw_offset = raw_kcontig_s16_offset(row, 2 * chunk);
    plane_offset = wgmma::swizzle(row * wgmma::kRowBytes + 16 * chunk);
  }

  // The raw words of one stage, read (load) well before they are permuted and stored (store):
  // the pipelined lean kernel keeps other work between the two to cover the LDS latency.
  struct Regs {
    uint4 even[2], odd[2];
  };

  __device__ __forceinline__ void load(uint32_t raw, Regs& r) const {
    const uint32_t from = raw + raw_offset;
    const uint32_t from_odd = from ^ 16u;
    // All reads first: the accesses are volatile asm, issued in program order, and the second
    // row's reads should not wait behind the first row's permutes.
#pragma unroll
    for (int it = 0; it < 2; ++it) {
      r.even[it] = lds128(from + 8192 * it);
      r.odd[it] = lds128(from_odd + 8192 * it);
    }
  }

  __device__ __forceinline__ void store(const Regs& r, uint32_t hi) const {
    const uint32_t to = hi + plane_offset;
#pragma unroll
    for (int it = 0; it < 2; ++it) {
      const uint4 a = r.even[it], b = r.odd[it];
      // Word q holds k = 2q (bytes 0 lo, 1 hi) and k = 2q + 1 (bytes 2 lo, 3 hi).
      const uint4 h = make_uint4(__byte_perm(a.x, a.y, 0x7531), __byte_perm(a.z, a.w, 0x7531),
                                 __byte_perm(b.x, b.y, 0x7531), __byte_perm(b.z, b.w, 0x7531));
      const uint4 l = make_uint4(__byte_perm(a.x, a.y, 0x6420), __byte_perm(a.z, a.w, 0x6420),
                                 __byte_perm(b.x, b.y, 0x6420), __byte_perm(b.z, b.w, 0x6420));
      sts128(to + 4096 * it, h);
      sts128(to + 4096 * it + kPlaneBytes, l);
    }
  }
};

// Four 8 × 8 matrices of 16-bit elements, transposed: lane t gives the address of row t % 8 of
// matrix t / 8 and receives, from each matrix, column t / 4 of rows 2·(t % 4) and 2·(t % 4) + 1.
__device__ __forceinline__ void ldsm_x4_trans(uint32_t address, uint32_t (&d)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
               : "r"(address)
               : "memory");
}

// int16 with unit stride along the rows (M or N), split and transposed. Two ldmatrix.trans
// cover 8 rows (one raw chunk) × all 64 k: matrix i of load s has as row r the k-row
// 16·(r / 2) + 8s + 2i + r % 2, so lane t receives row t / 4 at k 16j … 16j + 15 (j = t % 4),
// two k per register in order. Four permutes per plane make the 16 bytes of that row and k run:
// one 16-byte store per plane. Per stage a thread does 4 ldmatrix, 16 permutes and 4 stores
// (the 4 × 4 transpose of 16-byte reads it replaces took 4 reads, 16 permutes, 16 4-byte stores
// and 7 address XORs).
// Warp w takes raw chunks (row groups) w and w + 8: chunk w + 8 is 128 bytes further in the raw
// slot (w < 8 and the swizzle key < 8) and 64 rows (4096 bytes) further in a plane; load s = 1 is
// 8 k-rows (2048 bytes) further (same key). The eight raw rows of one matrix have the eight keys
// g = r, so the reads are free of bank conflicts; each quarter-warp's 16-byte stores fill two
// whole 64-byte plane rows. A plane slot's base is a multiple of 1024, so base + offset keeps the
// swizzle.
struct LeanS16RowContigSplit {
  uint32_t raw_offset;    // this lane's ldmatrix row in chunk w, load 0
  uint32_t plane_offset;  // its 16-byte store for chunk w

  __device__ __forceinline__ void init() {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int matrix = lane >> 3, r = lane & 7;
    raw_offset = raw_rowcontig_offset(16 * (r >> 1) + 2 * matrix + (r & 1), warp, 256);
    plane_offset = wgmma::swizzle((8 * warp + (lane >> 2)) * wgmma::kRowBytes + 16 * (lane & 3));
  }

  struct Regs {
    uint32_t v[2][2][4];  // [chunk w, w + 8][load s][matrix i]
  };

  __device__ __forceinline__ void load(uint32_t raw, Regs& r) const {
    const uint32_t from = raw + raw_offset;
#pragma unroll
    for (int c = 0; c < 2; ++c) {
#pragma unroll
      for (int l = 0; l < 2; ++l) ldsm_x4_trans(from + 128 * c + 2048 * l, r.v[c][l]);
    }
  }

  // hi, lo: shared addresses of the two planes (the lean kernels' low plane is kPlaneBytes on).
  __device__ __forceinline__ void store(const Regs& r, uint32_t hi, uint32_t lo) const {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      // Register i of load s holds k = 16j + 8s + 2i (bytes 0 lo, 1 hi) and the next k (2, 3).
      const uint32_t(&d)[2][4] = r.v[c];
      const uint4 h =
          make_uint4(__byte_perm(d[0][0], d[0][1], 0x7531), __byte_perm(d[0][2], d[0][3], 0x7531),
                     __byte_perm(d[1][0], d[1][1], 0x7531), __byte_perm(d[1][2], d[1][3], 0x7531));
      const uint4 l =
          make_uint4(__byte_perm(d[0][0], d[0][1], 0x6420), __byte_perm(d[0][2], d[0][3], 0x6420),
                     __byte_perm(d[1][0], d[1][1], 0x6420), __byte_perm(d[1][2], d[1][3], 0x6420));
      sts128(hi + plane_offset + 4096u * c, h);
      sts128(lo + plane_offset + 4096u * c, l);
    }
  }
  __device__ __forceinline__ void store(const Regs& r, uint32_t hi) const {
    store(r, hi, hi + kPlaneBytes);
  }
};

// The same by generic pointers, for the RS kernel's B loader interface.
struct S16RowContig {
  LeanS16RowContigSplit split;
  LeanS16RowContigSplit::Regs regs;

  __device__ __forceinline__ void load_raw(const unsigned char* raw) {
    split.init();
    split.load(static_cast<uint32_t>(__cvta_generic_to_shared(raw)), regs);
  }
  __device__ __forceinline__ void store(unsigned char* hi_plane, unsigned char* lo_plane) const {
    split.store(regs, static_cast<uint32_t>(__cvta_generic_to_shared(hi_plane)),
                static_cast<uint32_t>(__cvta_generic_to_shared(lo_plane)));
  }
};

// The same for U8RowContig (4 k-rows × 8 rows of bytes → 8 rows × 4 k): rows 4h + r of word h.
struct LeanU8RowContigSplit {
  uint32_t sel_a, sel_b;  // picks rows 0 and 1 (or 2 and 3) of a pair, swapped when flip
  uint32_t raw_offset;    // the first of four reads kRows bytes apart
  uint32_t plane_offset;

  template <int kRows>
  __device__ __forceinline__ void init(int group_offset) {
    const int group = transpose_group() + group_offset;
    const int kw = transpose_kword();
    const int flip = transpose_flip();
    sel_a = flip ? 0x7632u : 0x5410u;
    sel_b = flip ? 0x5410u : 0x7632u;
    raw_offset = raw_u8_rowcontig_offset<kRows>(4 * kw, group >> 1) + 8 * (group & 1);
    plane_offset = 512u * group + 64u * flip + 4u * kw;
  }

  struct Regs {
    uint2 v[4];
  };

  template <int kRows>
  __device__ __forceinline__ void load(uint32_t raw, Regs& r) const {
    const uint32_t from = raw + raw_offset;
#pragma unroll
    for (int i = 0; i < 4; ++i) r.v[i] = lds64(from + kRows * i);
  }

  __device__ __forceinline__ void store(const Regs& r, uint32_t plane) const {
    const uint32_t to = plane + plane_offset;
    const uint2* const v = r.v;
    const uint32_t w[4][2] = {
        {v[0].x, v[0].y}, {v[1].x, v[1].y}, {v[2].x, v[2].y}, {v[3].x, v[3].y}};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t p01 = __byte_perm(w[0][h], w[1][h], 0x5140);  // rows 0, 1 of k0, k1
      const uint32_t p23 = __byte_perm(w[2][h], w[3][h], 0x5140);
      const uint32_t q01 = __byte_perm(w[0][h], w[1][h], 0x7362);  // rows 2, 3 of k0, k1
      const uint32_t q23 = __byte_perm(w[2][h], w[3][h], 0x7362);
      // Output j = 4h + r holds row 4h + (r ^ flip).
      const uint32_t out[4] = {__byte_perm(p01, p23, sel_a), __byte_perm(p01, p23, sel_b),
                               __byte_perm(q01, q23, sel_a), __byte_perm(q01, q23, sel_b)};
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int j = 4 * h + r;
        sts32(to ^ (144u * (j >> 1) + 64u * (j & 1)), out[r]);
      }
    }
  }
};

__device__ __forceinline__ uint32_t lds32(uint32_t address) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(address) : "memory");
  return v;
}

// The rows 128 … 191 of a wide n-contiguous u8 tile, spread over all eight warps: an unpipelined
// version gave them to warps 0-3 as a whole second transpose pass (warpgroup 0 then split 1.5×
// the bytes of warpgroup 1 every stage, and the barrier waits for the slower one). Here the
// eight 8-row groups of those rows are taken by group g % 8 of every warp, warps 0-3 doing word
// h = 0 (rows 0-3 of the group) and warps 4-7 word h = 1 (rows 4-7), so every thread splits
// 1.5 groups' worth. Word h of LeanU8RowContigSplit goes to C(4h + r) = 288·h ^ C(r) (144 and
// 288 share no bits), so h is folded into the thread's plane offset once.
struct LeanU8RowContigHalfSplit {
  uint32_t sel_a, sel_b;
  uint32_t raw_offset;    // word h of the first of four reads kRows bytes apart
  uint32_t plane_offset;  // T ^ 288·h

  struct Regs {
    uint32_t w[4];
  };

  template <int kRows>
  __device__ __forceinline__ void init() {
    const int g = transpose_group();
    const int group = 16 + (g & 7);
    const int h = g >> 3;
    const int kw = transpose_kword();
    const int flip = transpose_flip();
    sel_a = flip ? 0x7632u : 0x5410u;
    sel_b = flip ? 0x5410u : 0x7632u;
    raw_offset = raw_u8_rowcontig_offset<kRows>(4 * kw, group >> 1) + 8 * (group & 1) + 4 * h;
    plane_offset = (512u * group + 64u * flip + 4u * kw) ^ (288u * h);
  }

  template <int kRows>
  __device__ __forceinline__ void load(uint32_t raw, Regs& r) const {
    const uint32_t from = raw + raw_offset;
#pragma unroll
    for (int i = 0; i < 4; ++i) r.w[i] = lds32(from + kRows * i);
  }

  __device__ __forceinline__ void store(const Regs& r, uint32_t plane) const {
    const uint32_t to = plane + plane_offset;
    const uint32_t p01 = __byte_perm(r.w[0], r.w[1], 0x5140);
    const uint32_t p23 = __byte_perm(r.w[2], r.w[3], 0x5140);
    const uint32_t q01 = __byte_perm(r.w[0], r.w[1], 0x7362);
    const uint32_t q23 = __byte_perm(r.w[2], r.w[3], 0x7362);
    sts32(to, __byte_perm(p01, p23, sel_a));
    sts32(to ^ 64u, __byte_perm(p01, p23, sel_b));
    sts32(to ^ 144u, __byte_perm(q01, q23, sel_a));
    sts32(to ^ 208u, __byte_perm(q01, q23, sel_b));
  }
};

// A k-contiguous u8 B by shared address (the bytes go to the plane unchanged): rows r + 64·it,
// 4096 bytes apart in both the raw slot and the plane (the 64-byte swizzle repeats every 512).
template <int kRows>
struct LeanU8KContigSplit {
  static constexpr int kPasses = kRows / 64;
  uint32_t raw_offset, plane_offset;

  struct Regs {
    uint4 v[kPasses];
  };

  __device__ __forceinline__ void init() {
    const int chunk = threadIdx.x & 3;
    const int row = threadIdx.x >> 2;
    raw_offset = row * 64 + 16 * chunk;
    plane_offset = wgmma::swizzle(row * wgmma::kRowBytes + 16 * chunk);
  }
  __device__ __forceinline__ void load(uint32_t raw, Regs& r) const {
#pragma unroll
    for (int it = 0; it < kPasses; ++it) r.v[it] = lds128(raw + raw_offset + 4096 * it);
  }
  __device__ __forceinline__ void store(const Regs& r, uint32_t plane) const {
#pragma unroll
    for (int it = 0; it < kPasses; ++it) sts128(plane + plane_offset + 4096 * it, r.v[it]);
  }
};

// The whole split of one stage for the pipelined lean kernel, in two halves: load() (load_a,
// load_b) reads the raw words of the stage into registers, store() permutes and writes the
// planes. The kernel reads A's words of stage s + 1 before the wgmmas and copies of stage s and
// B's after them, just before store(): A's ~30-cycle LDS latency is covered by the wgmma and
// copy issue and B's by A's permutes, instead of stalling each permute (with two warps per
// scheduler nothing else hides it). Loading B early too would keep 32 more registers live
// across the copy issue, where the 3 · 64 accumulators leave too few (ptxas spills).
template <bool kBIsU8, bool kAKContig, bool kBKContig, int kTileN>
struct LeanSplitter {
  static constexpr int kAHi = 0, kBHi = 2 * kPlaneBytes;
  static constexpr bool kWideU8RowContig = kBIsU8 && !kBKContig && kTileN > kWgmmaTileN;
  using ASplit = std::conditional_t<kAKContig, LeanS16KContigSplit, LeanS16RowContigSplit>;
  using BSplit = std::conditional_t<
      kBIsU8, std::conditional_t<kBKContig, LeanU8KContigSplit<kTileN>, LeanU8RowContigSplit>,
      std::conditional_t<kBKContig, LeanS16KContigSplit, LeanS16RowContigSplit>>;
  ASplit a;
  BSplit b;
  LeanU8RowContigHalfSplit b_extra;  // kWideU8RowContig only

  struct Regs {
    typename ASplit::Regs a;
    typename BSplit::Regs b;
    LeanU8RowContigHalfSplit::Regs b_extra;
  };

  __device__ __forceinline__ void init() {
    a.init();
    if constexpr (kBIsU8 && !kBKContig) {
      b.template init<kTileN>(0);
      if constexpr (kWideU8RowContig) b_extra.template init<kTileN>();
    } else {
      b.init();
    }
  }

  // raw: shared address of the stage's raw slot; A's part first, B's kRawS16Bytes after it.
  __device__ __forceinline__ void load(uint32_t raw, Regs& r) const {
    load_a(raw, r);
    load_b(raw, r);
  }
  __device__ __forceinline__ void load_a(uint32_t raw, Regs& r) const { a.load(raw, r.a); }
  __device__ __forceinline__ void load_b(uint32_t raw, Regs& r) const {
    if constexpr (kBIsU8 && !kBKContig) {
      b.template load<kTileN>(raw + kRawS16Bytes, r.b);
      if constexpr (kWideU8RowContig) b_extra.template load<kTileN>(raw + kRawS16Bytes, r.b_extra);
    } else {
      b.load(raw + kRawS16Bytes, r.b);
    }
  }

  // planes: shared address of the stage's plane slot.
  __device__ __forceinline__ void store(const Regs& r, uint32_t planes) const {
    store_a(r, planes);
    store_b(r, planes);
  }
  __device__ __forceinline__ void store_a(const Regs& r, uint32_t planes) const {
    a.store(r.a, planes + kAHi);
  }
  __device__ __forceinline__ void store_b(const Regs& r, uint32_t planes) const {
    b.store(r.b, planes + kBHi);
    if constexpr (kWideU8RowContig) b_extra.store(r.b_extra, planes + kBHi);
  }
};

}  // namespace wgmma_detail

// The lean deep kernel (see "The lean deep kernel" above): the raw ring (see "The raw ring"
// above), `p.raw_stages` slots deep, in front of a 3-slot plane ring.
//
// Iteration s: issue the wgmmas of stage s (plane slot s % 3); issue the copies of stage s + R
// into raw slot s % R (stage s left it when it was split, in iteration s − 1, before that
// iteration's barrier); split raw stage s + 1 (landed and made visible by the previous barrier)
// into plane slot (s + 1) % 3, last read by the wgmmas of stage s − 2, which both warpgroups
// finished before the previous barrier; wait until raw stage s + 2 has landed (cp.async groups:
// one per stage, empty ones past the end, so "R − 2 pending" always means stage s + 2) and until
// at most one wgmma group is pending; barrier. R − 1 stages stay in flight while one is split.
// The split of stage s + 1 reads its raw words before the wgmmas and copies of stage s and
// permutes/stores them after (LeanSplitter), and a wide n-contiguous u8 B's extra rows are split
// by all eight warps.
//
// kGather (implicit GEMM, see ConvGather): kGatherTaps gathers an n-contiguous B (no batch): K
// counts stages of the tap-major walk (p.k = 64 · taps · channel_stages) and every stage's copies
// go through the gather and A's per-stage offset. kGatherUpdate gathers a k-contiguous B, one tap
// per grid z ("batch": the output's batch stride steps taps), A as in a plain GEMM.
// kGatherUpdateStreamK is the same gather walking a stream-K schedule (IntegerGemmArgs::sk_ctas)
// instead of one grid tile: its own instantiation, because the work-item loop costs the
// one-tile launches 2-3 % (measured on fprop and bprop).
inline constexpr int kGatherNone = 0, kGatherTaps = 1, kGatherUpdate = 2, kGatherUpdateStreamK = 3;
template <bool kBIsU8, bool kAKContig, bool kBKContig, int kTileN = kWgmmaTileN,
          int kGather = kGatherNone>
__global__ void __launch_bounds__(kWgmmaThreads, 1)
    gemm_wgmma_lean_kernel(const __grid_constant__ IntegerGemmArgs p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace wgmma_detail;
  using BElement = std::conditional_t<kBIsU8, uint8_t, int16_t>;
  static_assert(kTileN == kWgmmaTileN || (kBIsU8 && kTileN == kWideTileN), "tile widths");
  static_assert(kGather != kGatherTaps || (!kBKContig && kTileN == kWgmmaTileN),
                "tap-major gathered B: n-contiguous");
  // The work items: stream-K (update only), or one tile of the grid.
  constexpr bool kStreamK = kGather == kGatherUpdateStreamK;
  constexpr bool kUpdateGather = kGather == kGatherUpdate || kStreamK;
  static_assert(!kUpdateGather || (kBKContig && kTileN == kWgmmaTileN),
                "update gathered B: k-contiguous");
  // The finishing pass of the shared tiles may launch now: its blocks start as these CTAs (one
  // per multiprocessor) leave, and wait for the whole grid before they read a slot.
  if constexpr (kStreamK) allow_dependent_launch();
  constexpr int kStageBytes = deep_stage_bytes(kBIsU8, kTileN);
  constexpr int kAHi = 0, kALo = kPlaneBytes, kBHi = 2 * kPlaneBytes, kBLo = 3 * kPlaneBytes;
  constexpr int kRawBytes = raw_stage_bytes(kBIsU8, kTileN);
  constexpr int kAccs = kTileN / 2;
  constexpr int kRawRing = kDeepPlaneSlots * kStageBytes;
  constexpr uint32_t kPlaneRingBytes = kDeepPlaneSlots * kStageBytes;
  constexpr int kDefaultRing = deep_max_raw_stages(kBIsU8, kTileN);
  static_assert(kDefaultRing >= 2 && kDefaultRing - 2 <= 7, "cp.async.wait_group immediate");
  const int raw_stages = p.raw_stages;

  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw_address = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  unsigned char* const smem = smem_raw + ((1024u - (raw_address & 1023u)) & 1023u);
  const uint32_t smem_address = static_cast<uint32_t>(__cvta_generic_to_shared(smem));

  // The CTA's work items: one tile (and K split) of the grid, or a stream-K schedule. A stream-K
  // item is decoded by one thread into shared memory and read back (volatile) where it is used,
  // so nothing of it stays in registers across the main loop beside the 192 accumulators.
  [[maybe_unused]] __shared__ WorkItem shared_item;
  [[maybe_unused]] __shared__ int shared_has_item;
  auto read_item = [&] {
    WorkItem w;
    const volatile WorkItem& v = shared_item;
    w.batch = v.batch;
    w.tile_m = v.tile_m;
    w.tile_n = v.tile_n;
    w.k_begin = v.k_begin;
    w.k_end = v.k_end;
    w.partial = v.partial;
    return w;
  };
#pragma unroll 1
  for (int item_index = 0;; ++item_index) {
    WorkItem item;
    if constexpr (!kStreamK) {
      if (item_index > 0) break;
      grid_item(p, item);
    } else {
      __syncthreads();  // the previous item's end has read shared memory and shared_item
      if (threadIdx.x == 0) {
        WorkItem w;
        const bool has = stream_k_item(p, item_index, w);
        *static_cast<volatile int*>(&shared_has_item) = has ? 1 : 0;
        if (has) {
          volatile WorkItem& v = shared_item;
          v.batch = w.batch;
          v.tile_m = w.tile_m;
          v.tile_n = w.tile_n;
          v.k_begin = w.k_begin;
          v.k_end = w.k_end;
          v.partial = w.partial;
        }
      }
      __syncthreads();
      if (*static_cast<volatile int*>(&shared_has_item) == 0) break;
      item = read_item();
    }
    const int64_t batch = item.batch;
    const int64_t row0 = item.tile_m * kWgmmaTileM;
    const int64_t col0 = item.tile_n * kTileN;
    const int64_t k_begin = item.k_begin;
    const int64_t k_len = item.k_end - k_begin;
    const int stage_count = static_cast<int>((k_len + kWgmmaStageK - 1) / kWgmmaStageK);
    const int rows_a = static_cast<int>(p.m - row0 < kWgmmaTileM ? p.m - row0 : kWgmmaTileM);
    const int rows_b = static_cast<int>(p.n - col0 < kTileN ? p.n - col0 : kTileN);

    const int16_t* const a_tile = static_cast<const int16_t*>(p.a.data) + batch * p.a.batch_stride +
                                  row0 * p.a.row_stride +
                                  (kGather == kGatherTaps ? 0 : k_begin * p.a.k_stride);
    const BElement* const b_tile = static_cast<const BElement*>(p.b.data) +
                                   batch * p.b.batch_stride + col0 * p.b.row_stride +
                                   k_begin * p.b.k_stride;
    const int64_t a_ld = kAKContig ? p.a.row_stride : p.a.k_stride;
    const int64_t b_ld = kBKContig ? p.b.row_stride : p.b.k_stride;
    const int64_t a_stage_step = kWgmmaStageK * p.a.k_stride;
    const int64_t b_stage_step = kWgmmaStageK * p.b.k_stride;
    auto k_valid = [&](int stage) {
      const int64_t left = k_len - int64_t(stage) * kWgmmaStageK;
      return static_cast<int>(left < kWgmmaStageK ? left : kWgmmaStageK);
    };

    // Copies: unguarded while the whole tile is inside the matrix and the stage is full (decided
    // once per stage, uniformly for the CTA); the guarded copies only at edges and the K tail.
    const bool interior = rows_a == kWgmmaTileM && rows_b == kTileN && !p.guarded_copies;
    const int full_stages = static_cast<int>(k_len / kWgmmaStageK);
    LeanCopy<int16_t, kAKContig, kWgmmaTileM> a_copy;
    LeanCopy<BElement, kBKContig, kTileN> b_copy;
    a_copy.init(a_tile, a_ld);
    b_copy.init(b_tile, b_ld);
    const int64_t a_stage_bytes = a_stage_step * int64_t(sizeof(int16_t));
    const int64_t b_stage_bytes = b_stage_step * int64_t(sizeof(BElement));
    const uint32_t raw_ring = smem_address + kRawRing;
    const uint32_t raw_ring_bytes = uint32_t(raw_stages) * kRawBytes;
    // Stages are issued strictly in order, so the fast path's pointers advance once per issue.
    [[maybe_unused]] GatherCopy<BElement> gather;
    [[maybe_unused]] TapWalk walk;
    [[maybe_unused]] int64_t a_first = 0;  // bytes from a stage's first element to a_copy's chunk 0
    [[maybe_unused]] GatherKCopy<BElement> gather_k;
    [[maybe_unused]] const BElement* const b_rows =
        static_cast<const BElement*>(p.b.data) + col0 * p.gather.channel_stride;
    if constexpr (kUpdateGather) gather_k.init(p.gather, batch, k_begin, k_len);
    if constexpr (kGather == kGatherTaps) {
      gather.init(p.gather, col0, p.n);
      walk.init(p.gather, k_begin / kWgmmaStageK);
      a_first = a_copy.src - reinterpret_cast<const unsigned char*>(a_tile);
    }
    auto issue_stage = [&](int stage, uint32_t slot) {
      const uint32_t raw = raw_ring + slot;
      if constexpr (kUpdateGather) {
        if (rows_a == kWgmmaTileM && stage < full_stages && !p.guarded_copies) {
          a_copy.issue(raw);
        } else {
          copy_raw_stage<int16_t, kAKContig>(raw, a_tile + stage * a_stage_step, a_ld, rows_a,
                                             k_valid(stage));
        }
        a_copy.src += a_stage_bytes;
        gather_k.issue(raw + kRawS16Bytes, b_rows, p.gather, rows_b);
        return;
      }
      if constexpr (kGather == kGatherTaps) {
        const int channels = walk.channels(p.gather);
        const int64_t a_offset = walk.a_offset;
        if (rows_a == kWgmmaTileM && channels == kWgmmaStageK && !p.guarded_copies) {
          a_copy.src = reinterpret_cast<const unsigned char*>(a_tile + a_offset) + a_first;
          a_copy.issue(raw);
        } else {
          copy_raw_stage<int16_t, kAKContig>(raw, a_tile + a_offset, a_ld, rows_a, channels);
        }
        gather.issue(raw + kRawS16Bytes, static_cast<const BElement*>(p.b.data), p.gather, walk,
                     channels);
        walk.advance(p.gather);
        return;
      }
      if (interior && stage < full_stages) {
        a_copy.issue(raw);
        b_copy.issue(raw + kRawS16Bytes);
      } else {
        copy_raw_stage<int16_t, kAKContig>(raw, a_tile + stage * a_stage_step, a_ld, rows_a,
                                           k_valid(stage));
        copy_raw_stage<BElement, kBKContig, kTileN>(
            raw + kRawS16Bytes, b_tile + stage * b_stage_step, b_ld, rows_b, k_valid(stage));
      }
      a_copy.src += a_stage_bytes;
      b_copy.src += b_stage_bytes;
    };

    // Split: the per-thread offsets of the transposing loaders once per CTA.
    LeanSplitter<kBIsU8, kAKContig, kBKContig, kTileN> splitter;
    using SplitRegs = typename LeanSplitter<kBIsU8, kAKContig, kBKContig, kTileN>::Regs;
    // A's raw words across the wgmma and copy issue cost 16 registers there; where ptxas then
    // spills (the wide u8 tile with B n-contiguous: 2 · 96 accumulators and three transposing
    // splitters' offsets) the stage is split A then B, just the extra rows balanced.
    constexpr bool kLoadAEarly = !(kBIsU8 && kTileN > kWgmmaTileN && !kBKContig);
    splitter.init();
    auto split_stage = [&](uint32_t raw_slot, uint32_t plane_slot) {
      const uint32_t raw_address = smem_address + kRawRing + raw_slot;
      const uint32_t base_address = smem_address + plane_slot;
      SplitRegs regs;
      splitter.load(raw_address, regs);
      splitter.store(regs, base_address);
    };

    // Descriptors of plane slot 0 (low words; the high word is the same for all), advanced per
    // stage and k step by adding (byte offset >> 4): addresses stay below 2^18, so the 14-bit
    // start-address field never carries into the leading-offset field.
    const int warpgroup = threadIdx.x >> 7;
    const uint32_t a_rows_offset = warpgroup * 64 * wgmma::kRowBytes;
    const uint64_t desc0 = wgmma::descriptor(smem_address);
    const uint32_t desc_hi = static_cast<uint32_t>(desc0 >> 32);
    const uint32_t desc_lo = static_cast<uint32_t>(desc0);
    const uint32_t d_a_hi = desc_lo + ((kAHi + a_rows_offset) >> 4);
    const uint32_t d_a_lo = desc_lo + ((kALo + a_rows_offset) >> 4);
    const uint32_t d_b_hi = desc_lo + (kBHi >> 4);
    const uint32_t d_b_lo = desc_lo + (kBLo >> 4);
    auto desc = [&](uint32_t lo) { return uint64_t(lo) | (uint64_t(desc_hi) << 32); };

    uint32_t acc_hi[kAccs], acc_mid[kAccs], acc_lo[kAccs];
#pragma unroll
    for (int i = 0; i < kAccs; ++i) acc_hi[i] = acc_lo[i] = 0;
    if constexpr (!kBIsU8) {
#pragma unroll
      for (int i = 0; i < 64; ++i) acc_mid[i] = 0;
    }

    for (int stage = 0; stage < raw_stages; ++stage) {
      if (stage < stage_count) issue_stage(stage, uint32_t(stage) * kRawBytes);
      cp_async_commit();
    }
    cp_async_wait_dynamic(raw_stages - 1);
    __syncthreads();
    split_stage(0, 0);
    cp_async_wait_dynamic(raw_stages - 2);
    wgmma::fence_proxy_async_shared();
    __syncthreads();

    // Ring positions as byte offsets: raw_issue holds stage s + R (= s % R), raw_split stage
    // s + 1, plane_mma stage s (s % 3), plane_split stage s + 1.
    uint32_t raw_issue = 0, raw_split = kRawBytes;  // raw_stages ≥ 2
    uint32_t plane_mma = 0, plane_split = kStageBytes;
#pragma unroll 1
    for (int stage = 0; stage < stage_count; ++stage) {
      const uint32_t slot = plane_mma >> 4;
      // Stage s + 1's raw slot is complete since the barrier that ended iteration s − 1
      // (cp.async.wait + __syncthreads), so its A words can be read before anything else here.
      // The last iteration splits too (stale raw bytes into plane slot (s + 1) % 3, which no
      // wgmma reads any more, and finish_tile reuses the shared memory only after the final
      // barrier): a load and a store under a `stage + 1 < stage_count` guard made nvcc thread that
      // branch through the wgmma and copy code between them, six copies of the loop body.
      SplitRegs split_regs;
      const uint32_t split_raw = smem_address + kRawRing + raw_split;
      if constexpr (kLoadAEarly) splitter.load_a(split_raw, split_regs);
      wgmma::fence();
#pragma unroll
      for (int ks = 0; ks < kWgmmaStageK / 32; ++ks) {
        const uint32_t step = slot + 2 * ks;  // 32 bytes along the 64-byte row, >> 4
        const uint64_t a_hi = desc(d_a_hi + step);
        const uint64_t a_lo = desc(d_a_lo + step);
        const uint64_t b_hi = desc(d_b_hi + step);
        if constexpr (kBIsU8 && kTileN == kWideTileN) {
          wgmma::wgmma_m64n192k32_s8u8(acc_hi, a_hi, b_hi);
          wgmma::wgmma_m64n192k32_u8u8(acc_lo, a_lo, b_hi);
        } else if constexpr (kBIsU8) {
          wgmma::wgmma_m64n128k32_s8u8(acc_hi, a_hi, b_hi);
          wgmma::wgmma_m64n128k32_u8u8(acc_lo, a_lo, b_hi);
        } else {
          wgmma::byte_products<false>(acc_hi, acc_mid, acc_lo, a_hi, a_lo, b_hi,
                                      desc(d_b_lo + step));
        }
      }
      wgmma::commit_group();
      if (stage + raw_stages < stage_count) issue_stage(stage + raw_stages, raw_issue);
      cp_async_commit();
      const uint32_t planes = smem_address + plane_split;
      if constexpr (kLoadAEarly) {
        splitter.load_b(split_raw, split_regs);
        splitter.store(split_regs, planes);
      } else {
        splitter.load_a(split_raw, split_regs);
        splitter.store_a(split_regs, planes);
        splitter.load_b(split_raw, split_regs);
        splitter.store_b(split_regs, planes);
      }
      raw_issue = raw_issue + kRawBytes == raw_ring_bytes ? 0u : raw_issue + kRawBytes;
      raw_split = raw_split + kRawBytes == raw_ring_bytes ? 0u : raw_split + kRawBytes;
      plane_mma = plane_split;
      plane_split = plane_split + kStageBytes == kPlaneRingBytes ? 0u : plane_split + kStageBytes;
      // The default depth (the deepest that fits) waits with one instruction, not a switch.
      if (raw_stages == kDefaultRing) {
        cp_async_wait<kDefaultRing - 2>();
      } else {
        cp_async_wait_dynamic(raw_stages - 2);
      }
      wgmma::wait_group<1>();
      wgmma::fence_proxy_async_shared();
      __syncthreads();
    }
    cp_async_wait<0>();
    if constexpr (!kStreamK) {
      finish_tile<kBIsU8, kTileN>(p, smem, acc_hi, acc_mid, acc_lo, batch, row0, col0, rows_a,
                                  rows_b);
    } else {
      const WorkItem end = read_item();
      const int64_t end_row0 = end.tile_m * kWgmmaTileM, end_col0 = end.tile_n * kTileN;
      finish_tile<kBIsU8, kTileN>(
          p, smem, acc_hi, acc_mid, acc_lo, end.batch, end_row0, end_col0,
          static_cast<int>(p.m - end_row0 < kWgmmaTileM ? p.m - end_row0 : kWgmmaTileM),
          static_cast<int>(p.n - end_col0 < kTileN ? p.n - end_col0 : kTileN), end.partial);
    }
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // the PTX fallback: never launched (prepare_wgmma reports false)
#endif
}

// Explicit instantiation + launch helpers for one element type of B: gemm_wgmma_lean_kernel.
// `wide`: the 192-column tile (a u8 B only).
template <bool kBIsU8>
bool prepare_wgmma_variant(bool a_k_contig, bool b_k_contig, bool wide);
template <bool kBIsU8>
void launch_wgmma_variant(bool a_k_contig, bool b_k_contig, bool wide, dim3 grid,
                          const IntegerGemmArgs& args, cudaStream_t stream);

namespace wgmma_detail {

template <bool kBIsU8, bool kAKContig, bool kBKContig, int kTileN, int kGather = kGatherNone>
bool prepare_one() {
  return prepare_sm90_kernel(gemm_wgmma_lean_kernel<kBIsU8, kAKContig, kBKContig, kTileN, kGather>,
                             deep_smem_bytes(kBIsU8, deep_max_raw_stages(kBIsU8, kTileN), kTileN));
}

template <bool kBIsU8, bool kAKContig, bool kBKContig, int kTileN, int kGather = kGatherNone>
void launch_one(dim3 grid, const IntegerGemmArgs& args, cudaStream_t stream) {
  gemm_wgmma_lean_kernel<kBIsU8, kAKContig, kBKContig, kTileN, kGather>
      <<<grid, kWgmmaThreads, deep_smem_bytes(kBIsU8, args.raw_stages, kTileN), stream>>>(args);
  FLEXKIT_CUDA_CHECK_LAUNCH("gemm_wgmma_lean_kernel");
}

template <bool kBIsU8, int kTileN>
bool prepare_layout(bool a_k_contig, bool b_k_contig) {
  if (a_k_contig) {
    return b_k_contig ? prepare_one<kBIsU8, true, true, kTileN>()
                      : prepare_one<kBIsU8, true, false, kTileN>();
  }
  return b_k_contig ? prepare_one<kBIsU8, false, true, kTileN>()
                    : prepare_one<kBIsU8, false, false, kTileN>();
}

template <bool kBIsU8, int kTileN>
void launch_layout(bool a_k_contig, bool b_k_contig, dim3 grid, const IntegerGemmArgs& args,
                   cudaStream_t stream) {
  if (a_k_contig) {
    if (b_k_contig) {
      launch_one<kBIsU8, true, true, kTileN>(grid, args, stream);
    } else {
      launch_one<kBIsU8, true, false, kTileN>(grid, args, stream);
    }
  } else if (b_k_contig) {
    launch_one<kBIsU8, false, true, kTileN>(grid, args, stream);
  } else {
    launch_one<kBIsU8, false, false, kTileN>(grid, args, stream);
  }
}

}  // namespace wgmma_detail

template <bool kBIsU8>
bool prepare_wgmma_variant(bool a_k_contig, bool b_k_contig, bool wide) {
  using namespace wgmma_detail;
  if constexpr (kBIsU8) {
    if (wide) return prepare_layout<kBIsU8, kWideTileN>(a_k_contig, b_k_contig);
  }
  return prepare_layout<kBIsU8, kWgmmaTileN>(a_k_contig, b_k_contig);
}

template <bool kBIsU8>
void launch_wgmma_variant(bool a_k_contig, bool b_k_contig, bool wide, dim3 grid,
                          const IntegerGemmArgs& args, cudaStream_t stream) {
  using namespace wgmma_detail;
  if constexpr (kBIsU8) {
    if (wide) return launch_layout<kBIsU8, kWideTileN>(a_k_contig, b_k_contig, grid, args, stream);
  }
  launch_layout<kBIsU8, kWgmmaTileN>(a_k_contig, b_k_contig, grid, args, stream);
}

}  // namespace flexkit::backend::cuda::gemm_kernels
