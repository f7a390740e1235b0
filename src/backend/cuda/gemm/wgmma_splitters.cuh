// The splitters of the lean sm_90a GEMM kernel: raw stages read back from the raw ring, each int16
// split into its signed high and unsigned low byte (a u8 operand kept as it is), transposed where
// the unit stride runs along M or N, and stored into the swizzled K-major planes wgmma reads.
#pragma once
#include <cstdint>
#include <type_traits>

#include "backend/cuda/gemm/gemm_wgmma.hpp"
#include "backend/cuda/gemm/wgmma_int8.cuh"
#include "backend/cuda/gemm/wgmma_ptx.cuh"
#include "backend/cuda/gemm/wgmma_ring.cuh"

namespace flexkit::backend::cuda::gemm_kernels {
namespace wgmma_detail {

// Row mapping shared by the transposing u8 splitters: a warp covers two groups of 8 rows × all 64
// k; lane % 16 picks a run of 4 k (one 32-bit word of a plane row), lane / 16 the row group. When
// storing, the upper half-warp walks its 8 rows in the order j ^ 1 so that the two half-warps
// always write rows of opposite parity, i.e. opposite halves of the banks.
__device__ __forceinline__ int transpose_group() {
  return 2 * (threadIdx.x >> 5) + ((threadIdx.x >> 4) & 1);
}
__device__ __forceinline__ int transpose_kword() {
  return threadIdx.x & 15;
}
__device__ __forceinline__ int transpose_flip() {
  return (threadIdx.x >> 4) & 1;
}
// The four k-rows' words a transposing u8 split reads (kRows bytes apart from `from`): 8 bytes
// each for a whole group, 4 for a half.
template <int kRows, typename Word>
__device__ __forceinline__ void load_four_k_rows(uint32_t from, Word (&w)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (sizeof(Word) == 8) {
      w[i] = lds64(from + kRows * i);
    } else {
      w[i] = lds32(from + kRows * i);
    }
  }
}

// int16 with unit stride along K, split by shared address: a thread owns 16 consecutive k of rows
// r = tid/4 and r + 64 (4 threads cover one 128-byte row segment), and the high bytes of 16 k form
// one 16-byte store (a quarter-warp writes two whole 64-byte rows: no bank conflict). Its raw
// reads are chunks 2c and 2c + 1 of rows r and r + 64 (the chunk swizzle f(r) is the same for both
// rows, and chunk 2c + 1 is chunk 2c with address bit 4 flipped); its plane writes are rows r and r
// + 64 (the same 64-byte swizzle phase, 4096 bytes apart). Raw slots and planes start on 1024-byte
// boundaries, so the XOR survives adding the base.
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

// u8 with unit stride along N, split by shared address: 4 k-rows × 8 bytes per thread, a 4 × 4
// byte transpose twice (4 k-rows × 8 rows of bytes → 8 rows × 4 k): rows 4h + r of word h.
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
    load_four_k_rows<kRows>(raw + raw_offset, r.v);
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
    load_four_k_rows<kRows>(raw + raw_offset, r.w);
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
}  // namespace flexkit::backend::cuda::gemm_kernels
