// The sm_90a exact integer GEMM kernel.
//
// Each int16 mantissa m is split in registers into a signed high byte h = m >> 8 and an unsigned
// low byte l = m & 0xff (m = 256·h + l), so a·b = 65536·hₐh_b + 256·(hₐl_b + lₐh_b) + lₐl_b:
// three int32 accumulators per output (hh: s8×s8; cross: s8×u8 and u8×s8 into the same registers;
// ll: u8×u8), combined exactly in int64 at the end. For a u8 B there are two: hₐ·b and lₐ·b.
//
// Data path (every int16 element of A and B is read from global memory once per CTA):
//   global int16 → registers (16-byte loads) → byte permutes → st.shared into K-major byte planes
//   (64-byte swizzle, the layout wgmma's 8-bit operands need) → fence.proxy.async + barrier →
//   wgmma reads both operands from shared memory.
// An operand whose unit stride runs along M or N is transposed in registers by the permutes
// (4 k-rows × 8 rows per thread become 8 runs of 4 k-bytes).
//
// Pipeline (no warp specialisation: the split needs registers, and the accumulators already take
// 3 · 64 of them per thread): 256 threads = 2 warpgroups, each owning 64 rows × 128 columns of
// the CTA tile. Iteration s issues the wgmmas of stage s asynchronously, then stores stage s+1
// (loaded into registers during iteration s−1) into the ring and loads stage s+2 into registers,
// then waits until at most one wgmma group is pending and synchronises. With a 3-slot ring the
// slot written in iteration s was last read by stage s−2, which both warpgroups finished before
// the barrier ending iteration s−1.
#pragma once
#include <cstdint>
#include <type_traits>

#include "backend/cuda/check.hpp"
#include "backend/cuda/gemm/gemm_kernel_args.cuh"
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

__host__ __device__ constexpr int stage_bytes(bool b_is_u8) {
  return (b_is_u8 ? 3 : 4) * kPlaneBytes;
}
__host__ __device__ constexpr int smem_bytes(bool b_is_u8) {
  return (kWgmmaStages * stage_bytes(b_is_u8) > kAccumulatorTileBytes
              ? kWgmmaStages * stage_bytes(b_is_u8)
              : kAccumulatorTileBytes) +
         kAlignSlack;
}
static_assert(smem_bytes(false) <= 227 * 1024, "over the sm_90 shared-memory limit per block");
static_assert(kWgmmaThreads == 256 && kWgmmaTileM == 128 && kWgmmaTileN == 128 &&
                  kWgmmaStageK == 64,
              "the loaders' thread mapping assumes these sizes");

// Guarded vector loads: a whole vector in one instruction; at a boundary element by element
// (never touching an address past `valid` elements), the rest zero.
__device__ __forceinline__ uint4 load_s16x8(const int16_t* p, int valid) {
  if (valid >= 8) return __ldg(reinterpret_cast<const uint4*>(p));
  uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
  for (int i = 0; i < 8; ++i)
    if (i < valid) w[i >> 1] |= uint32_t(uint16_t(__ldg(p + i))) << (16 * (i & 1));
  return make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ __forceinline__ uint4 load_u8x16(const uint8_t* p, int valid) {
  if (valid >= 16) return __ldg(reinterpret_cast<const uint4*>(p));
  uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
  for (int i = 0; i < 16; ++i)
    if (i < valid) w[i >> 2] |= uint32_t(__ldg(p + i)) << (8 * (i & 3));
  return make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ __forceinline__ uint2 load_u8x8(const uint8_t* p, int valid) {
  if (valid >= 8) return __ldg(reinterpret_cast<const uint2*>(p));
  uint32_t w[2] = {0, 0};
#pragma unroll
  for (int i = 0; i < 8; ++i)
    if (i < valid) w[i >> 2] |= uint32_t(__ldg(p + i)) << (8 * (i & 3));
  return make_uint2(w[0], w[1]);
}

__device__ __forceinline__ void store_shared(unsigned char* plane, uint32_t offset, uint4 v) {
  *reinterpret_cast<uint4*>(plane + wgmma::swizzle(offset)) = v;
}
__device__ __forceinline__ void store_shared(unsigned char* plane, uint32_t offset, uint32_t v) {
  *reinterpret_cast<uint32_t*>(plane + wgmma::swizzle(offset)) = v;
}

// Loaders: `load` brings this thread's share of one stage (128 rows × 64 k of the operand, `tile`
// pointing at row 0, k 0 of the stage; `ld` the non-unit stride) into registers, zero beyond
// rows_valid / k_valid; `store` splits it and writes it into the stage's planes.

// int16, unit stride along K: a thread owns 16 consecutive k of rows tid/4 and tid/4 + 64
// (4 threads cover one 128-byte row segment: coalesced). High bytes of 16 k form one 16-byte
// store; a quarter-warp writes two whole 64-byte rows: no bank conflict.
struct S16KContig {
  uint4 v[2][2];

  __device__ __forceinline__ void load(const int16_t* tile, int64_t ld, int rows_valid,
                                       int k_valid) {
    const int chunk = threadIdx.x & 3;
#pragma unroll
    for (int it = 0; it < 2; ++it) {
      const int row = (threadIdx.x >> 2) + 64 * it;
#pragma unroll
      for (int h = 0; h < 2; ++h)
        v[it][h] = row < rows_valid ? load_s16x8(tile + row * ld + 16 * chunk + 8 * h,
                                                 k_valid - 16 * chunk - 8 * h)
                                    : make_uint4(0, 0, 0, 0);
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

// Row mapping shared by the transposing loaders: a warp covers two groups of 8 rows × all 64 k;
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

// int16, unit stride along the rows (M or N): a thread loads 4 k-rows × 8 rows (four 16-byte
// loads) and turns them into 8 rows × 4 k of high bytes and of low bytes (one word each).
struct S16RowContig {
  uint4 v[4];

  __device__ __forceinline__ void load(const int16_t* tile, int64_t ld, int rows_valid,
                                       int k_valid) {
    const int group = transpose_group();
    const int kw = transpose_kword();
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int k = 4 * kw + i;
      v[i] = k < k_valid ? load_s16x8(tile + k * ld + 8 * group, rows_valid - 8 * group)
                         : make_uint4(0, 0, 0, 0);
    }
  }

  __device__ __forceinline__ void store(unsigned char* hi_plane, unsigned char* lo_plane) const {
    const int group = transpose_group();
    const int kw = transpose_kword();
    const int flip = transpose_flip();
    const uint32_t w[4][4] = {{v[0].x, v[0].y, v[0].z, v[0].w},
                              {v[1].x, v[1].y, v[1].z, v[1].w},
                              {v[2].x, v[2].y, v[2].z, v[2].w},
                              {v[3].x, v[3].y, v[3].z, v[3].w}};
    uint32_t hi[8], lo[8];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      // Word q of k-row i holds rows 2q (bytes 0 lo, 1 hi) and 2q + 1 (bytes 2 lo, 3 hi).
      const uint32_t even01 = __byte_perm(w[0][q], w[1][q], 0x5140);  // k0.b0 k1.b0 k0.b1 k1.b1
      const uint32_t even23 = __byte_perm(w[2][q], w[3][q], 0x5140);
      const uint32_t odd01 = __byte_perm(w[0][q], w[1][q], 0x7362);  // k0.b2 k1.b2 k0.b3 k1.b3
      const uint32_t odd23 = __byte_perm(w[2][q], w[3][q], 0x7362);
      lo[2 * q] = __byte_perm(even01, even23, 0x5410);
      hi[2 * q] = __byte_perm(even01, even23, 0x7632);
      lo[2 * q + 1] = __byte_perm(odd01, odd23, 0x5410);
      hi[2 * q + 1] = __byte_perm(odd01, odd23, 0x7632);
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int row = 8 * group + (j ^ flip);
      const uint32_t offset = row * wgmma::kRowBytes + 4 * kw;
      store_shared(hi_plane, offset, flip ? hi[j ^ 1] : hi[j]);
      store_shared(lo_plane, offset, flip ? lo[j ^ 1] : lo[j]);
    }
  }
};

// u8, unit stride along K: bytes go to the plane unchanged, 16 k per thread and row.
struct U8KContig {
  uint4 v[2];

  __device__ __forceinline__ void load(const uint8_t* tile, int64_t ld, int rows_valid,
                                       int k_valid) {
    const int chunk = threadIdx.x & 3;
#pragma unroll
    for (int it = 0; it < 2; ++it) {
      const int row = (threadIdx.x >> 2) + 64 * it;
      v[it] = row < rows_valid ? load_u8x16(tile + row * ld + 16 * chunk, k_valid - 16 * chunk)
                               : make_uint4(0, 0, 0, 0);
    }
  }

  __device__ __forceinline__ void store(unsigned char* plane) const {
    const int chunk = threadIdx.x & 3;
#pragma unroll
    for (int it = 0; it < 2; ++it) {
      const int row = (threadIdx.x >> 2) + 64 * it;
      store_shared(plane, row * wgmma::kRowBytes + 16 * chunk, v[it]);
    }
  }
};

// u8, unit stride along N: 4 k-rows × 8 bytes per thread, a 4 × 4 byte transpose twice.
struct U8RowContig {
  uint2 v[4];

  __device__ __forceinline__ void load(const uint8_t* tile, int64_t ld, int rows_valid,
                                       int k_valid) {
    const int group = transpose_group();
    const int kw = transpose_kword();
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int k = 4 * kw + i;
      v[i] = k < k_valid ? load_u8x8(tile + k * ld + 8 * group, rows_valid - 8 * group)
                         : make_uint2(0, 0);
    }
  }

  __device__ __forceinline__ void store(unsigned char* plane) const {
    const int group = transpose_group();
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
  const int64_t per_group = kGroup * tiles_n;
  const int64_t group = tile / per_group;
  const int64_t first_m = group * kGroup;
  const int64_t group_m = tiles_m - first_m < kGroup ? tiles_m - first_m : kGroup;
  const int64_t in_group = tile - group * per_group;
  tile_m = first_m + in_group % group_m;
  tile_n = in_group / group_m;
}

}  // namespace wgmma_detail

template <bool kBIsU8, bool kAKContig, bool kBKContig>
__global__ void __launch_bounds__(kWgmmaThreads, 1)
    gemm_wgmma_kernel(const __grid_constant__ IntegerGemmArgs p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace wgmma_detail;
  using BElement = std::conditional_t<kBIsU8, uint8_t, int16_t>;
  using ALoader = std::conditional_t<kAKContig, S16KContig, S16RowContig>;
  using BLoader = std::conditional_t<kBIsU8, std::conditional_t<kBKContig, U8KContig, U8RowContig>,
                                     std::conditional_t<kBKContig, S16KContig, S16RowContig>>;
  constexpr int kStageBytes = stage_bytes(kBIsU8);
  // Plane order inside a stage: A high, A low, B high (or B bytes), B low.
  constexpr int kAHi = 0, kALo = kPlaneBytes, kBHi = 2 * kPlaneBytes, kBLo = 3 * kPlaneBytes;

  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw_address = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  unsigned char* const smem = smem_raw + ((1024u - (raw_address & 1023u)) & 1023u);
  const uint32_t smem_address = static_cast<uint32_t>(__cvta_generic_to_shared(smem));

  int64_t tile_m, tile_n;
  grouped_tile(blockIdx.x, p.tiles_m, p.tiles_n, tile_m, tile_n);
  const int64_t batch = p.batch_offset + blockIdx.z;
  const int64_t row0 = tile_m * kWgmmaTileM;
  const int64_t col0 = tile_n * kWgmmaTileN;
  const int64_t k_begin = int64_t(blockIdx.y) * p.k_chunk;
  const int64_t k_end = p.k < k_begin + p.k_chunk ? p.k : k_begin + p.k_chunk;
  const int64_t k_len = k_end - k_begin;
  const int stage_count = static_cast<int>((k_len + kWgmmaStageK - 1) / kWgmmaStageK);
  const int rows_a = static_cast<int>(p.m - row0 < kWgmmaTileM ? p.m - row0 : kWgmmaTileM);
  const int rows_b = static_cast<int>(p.n - col0 < kWgmmaTileN ? p.n - col0 : kWgmmaTileN);

  const int16_t* const a_tile = static_cast<const int16_t*>(p.a.data) + batch * p.a.batch_stride +
                                row0 * p.a.row_stride + k_begin * p.a.k_stride;
  const BElement* const b_tile = static_cast<const BElement*>(p.b.data) + batch * p.b.batch_stride +
                                 col0 * p.b.row_stride + k_begin * p.b.k_stride;
  const int64_t a_ld = kAKContig ? p.a.row_stride : p.a.k_stride;
  const int64_t b_ld = kBKContig ? p.b.row_stride : p.b.k_stride;
  const int64_t a_stage_step = kWgmmaStageK * p.a.k_stride;
  const int64_t b_stage_step = kWgmmaStageK * p.b.k_stride;
  auto k_valid = [&](int stage) {
    const int64_t left = k_len - int64_t(stage) * kWgmmaStageK;
    return static_cast<int>(left < kWgmmaStageK ? left : kWgmmaStageK);
  };

  ALoader a_loader;
  BLoader b_loader;
  auto load_stage = [&](int stage) {
    a_loader.load(a_tile + stage * a_stage_step, a_ld, rows_a, k_valid(stage));
    b_loader.load(b_tile + stage * b_stage_step, b_ld, rows_b, k_valid(stage));
  };
  auto store_stage = [&](int slot) {
    unsigned char* const base = smem + slot * kStageBytes;
    a_loader.store(base + kAHi, base + kALo);
    if constexpr (kBIsU8) {
      b_loader.store(base + kBHi);
    } else {
      b_loader.store(base + kBHi, base + kBLo);
    }
  };

  // hi: hh (or hₐ·b for a u8 B), mid: cross (unused for a u8 B), lo: ll (or lₐ·b).
  uint32_t acc_hi[64], acc_mid[64], acc_lo[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc_hi[i] = acc_lo[i] = 0;
  if constexpr (!kBIsU8) {
#pragma unroll
    for (int i = 0; i < 64; ++i) acc_mid[i] = 0;
  }

  load_stage(0);
  store_stage(0);
  if (stage_count > 1) load_stage(1);
  wgmma::fence_proxy_async_shared();
  __syncthreads();

  const int warpgroup = threadIdx.x >> 7;
  const uint32_t a_rows_offset = warpgroup * 64 * wgmma::kRowBytes;
  for (int stage = 0; stage < stage_count; ++stage) {
    const uint32_t base = smem_address + (stage % kWgmmaStages) * kStageBytes;
    wgmma::fence();
#pragma unroll
    for (int ks = 0; ks < kWgmmaStageK / 32; ++ks) {
      const uint32_t k_offset = 32 * ks;  // bytes along the 64-byte row
      const uint64_t a_hi = wgmma::descriptor(base + kAHi + a_rows_offset + k_offset);
      const uint64_t a_lo = wgmma::descriptor(base + kALo + a_rows_offset + k_offset);
      const uint64_t b_hi = wgmma::descriptor(base + kBHi + k_offset);
      if constexpr (kBIsU8) {
        wgmma::wgmma_m64n128k32_s8u8(acc_hi, a_hi, b_hi);
        wgmma::wgmma_m64n128k32_u8u8(acc_lo, a_lo, b_hi);
      } else {
        const uint64_t b_lo = wgmma::descriptor(base + kBLo + k_offset);
        // The two cross products are not issued back to back: they chain on one accumulator.
        wgmma::wgmma_m64n128k32_s8s8(acc_hi, a_hi, b_hi);
        wgmma::wgmma_m64n128k32_s8u8(acc_mid, a_hi, b_lo);
        wgmma::wgmma_m64n128k32_u8u8(acc_lo, a_lo, b_lo);
        wgmma::wgmma_m64n128k32_u8s8(acc_mid, a_lo, b_hi);
      }
    }
    wgmma::commit_group();
    if (stage + 1 < stage_count) store_stage((stage + 1) % kWgmmaStages);
    if (stage + 2 < stage_count) load_stage(stage + 2);
    wgmma::wait_group<1>();
    wgmma::fence_proxy_async_shared();
    __syncthreads();
  }
  wgmma::wait_group<0>();
  wgmma::pin_registers(acc_hi);
  if constexpr (!kBIsU8) wgmma::pin_registers(acc_mid);
  wgmma::pin_registers(acc_lo);
  // Both warpgroups' last wgmmas have read the ring before it becomes the accumulator tile.
  __syncthreads();

  int64_t* const tile = reinterpret_cast<int64_t*>(smem);
  {
    const int warp_in_group = (threadIdx.x >> 5) & 3;
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < 64; ++i) {
      const int row = 64 * warpgroup + 16 * warp_in_group + (lane >> 2) + 8 * ((i >> 1) & 1);
      const int col = 8 * (i >> 2) + 2 * (lane & 3) + (i & 1);
      int64_t acc;
      if constexpr (kBIsU8) {
        acc = int64_t(int32_t(acc_hi[i])) * 256 + int64_t(int32_t(acc_lo[i]));
      } else {
        acc = int64_t(int32_t(acc_hi[i])) * 65536 + int64_t(int32_t(acc_mid[i])) * 256 +
              int64_t(int32_t(acc_lo[i]));
      }
      tile[row * kTilePitch + col] = acc;
    }
  }
  __syncthreads();

  // One pass over the tile with consecutive threads along the output's unit stride.
  const bool split = p.splits > 1;
  const bool columns_fastest = split || p.c.col_stride == 1 || p.c.row_stride != 1;
  portable::GemmStats stats = portable::gemm_stats_identity();
#pragma unroll 1
  for (int index = threadIdx.x; index < kWgmmaTileM * kWgmmaTileN; index += kWgmmaThreads) {
    const int r = columns_fastest ? index / kWgmmaTileN : index % kWgmmaTileM;
    const int c = columns_fastest ? index % kWgmmaTileN : index / kWgmmaTileM;
    if (r >= rows_a || c >= rows_b) continue;
    const int64_t acc = tile[r * kTilePitch + c];
    if (split) {
      add_partial(p, batch, row0 + r, col0 + c, acc);
    } else {
      finish_element(p, batch, row0 + r, col0 + c, acc, stats);
    }
  }
  if (!split) commit_block_stats(stats, p.stats);
#elif defined(__CUDA_ARCH__)
  // Built without sm_90a code (the PTX fallback): the host never launches this, see
  // prepare_wgmma. Fail loudly rather than leave the output unwritten.
  __trap();
#endif
}

// Explicit instantiation + launch helpers for one element type of B.
template <bool kBIsU8>
bool prepare_wgmma_variant(bool a_k_contig, bool b_k_contig);
template <bool kBIsU8>
void launch_wgmma_variant(bool a_k_contig, bool b_k_contig, dim3 grid, const IntegerGemmArgs& args,
                          cudaStream_t stream);

namespace wgmma_detail {

template <bool kBIsU8, bool kAKContig, bool kBKContig>
bool prepare_one() {
  auto kernel = gemm_wgmma_kernel<kBIsU8, kAKContig, kBKContig>;
  cudaFuncAttributes attributes{};
  FLEXKIT_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  // ptxVersion is the virtual architecture the loaded code came from: 90 for the sm_90a image,
  // 75 when the driver JIT-compiled the compute_75 fallback (whose body is only a trap).
  if (attributes.binaryVersion != 90 || attributes.ptxVersion < 90) return false;
  FLEXKIT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          smem_bytes(kBIsU8)));
  return true;
}

template <bool kBIsU8, bool kAKContig, bool kBKContig>
void launch_one(dim3 grid, const IntegerGemmArgs& args, cudaStream_t stream) {
  gemm_wgmma_kernel<kBIsU8, kAKContig, kBKContig>
      <<<grid, kWgmmaThreads, smem_bytes(kBIsU8), stream>>>(args);
  FLEXKIT_CUDA_CHECK_LAUNCH("gemm_wgmma_kernel");
}

}  // namespace wgmma_detail

template <bool kBIsU8>
bool prepare_wgmma_variant(bool a_k_contig, bool b_k_contig) {
  using namespace wgmma_detail;
  if (a_k_contig) {
    return b_k_contig ? prepare_one<kBIsU8, true, true>() : prepare_one<kBIsU8, true, false>();
  }
  return b_k_contig ? prepare_one<kBIsU8, false, true>() : prepare_one<kBIsU8, false, false>();
}

template <bool kBIsU8>
void launch_wgmma_variant(bool a_k_contig, bool b_k_contig, dim3 grid, const IntegerGemmArgs& args,
                          cudaStream_t stream) {
  using namespace wgmma_detail;
  if (a_k_contig) {
    if (b_k_contig) {
      launch_one<kBIsU8, true, true>(grid, args, stream);
    } else {
      launch_one<kBIsU8, true, false>(grid, args, stream);
    }
  } else if (b_k_contig) {
    launch_one<kBIsU8, false, true>(grid, args, stream);
  } else {
    launch_one<kBIsU8, false, false>(grid, args, stream);
  }
}

}  // namespace flexkit::backend::cuda::gemm_kernels
