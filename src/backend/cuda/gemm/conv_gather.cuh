// The implicit-GEMM gathers of the convolution kernels: B's raw stages copied straight from the
// activations (see ConvGather), for the lean kernel's fprop / bprop and update forms and the
// warp-specialised shallow kernel's producers.
#pragma once
#include <cstdint>

#include "backend/cuda/gemm/gemm_kernel_args.cuh"
#include "backend/cuda/gemm/gemm_wgmma.hpp"
#include "backend/cuda/gemm/wgmma_ptx.cuh"
#include "backend/cuda/gemm/wgmma_ring.cuh"

namespace flexkit::backend::cuda::gemm_kernels {
namespace wgmma_detail {

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

// A gathering thread's terms of its column's position (o, n0): x0_d = o_d·out_step_d + base_d,
// and base_offset = n0 + k_first · channel_stride, plus Σ_d x0_d · in_stride_d where the
// gradient is not strided.
__device__ __forceinline__ void gather_position(const ConvGather& g, const int64_t (&o)[3],
                                                int64_t n0, int32_t k_first, int32_t (&x0)[3],
                                                int64_t& base_offset) {
#pragma unroll
  for (int d = 0; d < 3; ++d) x0[d] = static_cast<int32_t>(o[d] * g.out_step[d] + g.base[d]);
  base_offset = n0 + int64_t(k_first) * g.channel_stride;
  if (!g.strided_gradient) {
#pragma unroll
    for (int d = 0; d < 3; ++d) base_offset += int64_t(x0[d]) * g.in_stride[d];
  }
}

// The source of a gathering thread's chunks in the stage `walk` is at; `ok` (on entry: whether
// the thread's column lies inside the GEMM's) becomes whether the tap's position lies inside the
// operand (outside it is the zero padding).
template <typename Element>
__device__ __forceinline__ const Element* gather_source(const Element* data, const ConvGather& g,
                                                        const TapWalk& walk, const int32_t (&x0)[3],
                                                        int64_t base_offset, bool& ok) {
  if (!g.strided_gradient) {
#pragma unroll
    for (int d = 0; d < 3; ++d)
      ok = ok && static_cast<uint32_t>(x0[d] + walk.disp(g, d)) < static_cast<uint32_t>(g.in[d]);
    return data + (base_offset + walk.b_offset);
  }
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
  return data + offset;
}

// The same with the copies' source size: 16 bytes, or 0 (zero fill) where the column lies past
// the GEMM's (column_ok false) or the position in the padding.
template <typename Element>
__device__ __forceinline__ const Element* gathered_chunks(const Element* data, const ConvGather& g,
                                                          const TapWalk& walk,
                                                          const int32_t (&x0)[3],
                                                          int64_t base_offset, bool column_ok,
                                                          int& bytes) {
  bool ok = column_ok;
  const Element* const src = gather_source(data, g, walk, x0, base_offset, ok);
  bytes = ok ? 16 : 0;
  return src;
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
    gather_position(g, o, n0, k_first, x0, base_offset);
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
    int bytes;
    const Element* const src = gathered_chunks(data, g, walk, x0, base_offset, column_ok, bytes);
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

// GatherCopy<int16_t>'s copies for 256 threads, taken by 128: thread t issues its own four
// chunks and those of thread t + 128, whose column chunk is the same and whose k-rows lie 32
// further (rowcontig_s16_first_k(u + 8) = rowcontig_s16_first_k(u) + 32, in the other half of
// the swizzle's key).
struct ProducerGather {
  static constexpr int kChunkElements = 8;
  int32_t x0[3];        // o_d·out_step_d + base_d of this thread's position
  int64_t base_offset;  // elements: n0 + first k-row · channel_stride + Σ_d x0_d · in_stride_d
  int32_t k_first;
  uint32_t dst0, dst1;  // slot offsets of the first chunk of each half
  bool column_ok;

  __device__ __forceinline__ void init_at(const ConvGather& g, int64_t col, const int64_t (&o)[3],
                                          int64_t n0, int64_t columns) {
    const int t = threadIdx.x;  // 0 … 127
    const int chunk = t & 15;
    k_first = rowcontig_s16_first_k(t >> 4);
    dst0 = raw_rowcontig_offset(k_first, chunk, 256);
    dst1 = raw_rowcontig_offset(k_first + 32, chunk, 256);
    column_ok = col < columns;
    gather_position(g, o, n0, k_first, x0, base_offset);
  }

  // The same checks and addresses as GatherCopy::issue; chunk j < 4 holds k-row k_first + 2j,
  // chunk j ≥ 4 k-row k_first + 32 + 2 (j − 4).
  __device__ __forceinline__ void issue(uint32_t slot, const int16_t* data, const ConvGather& g,
                                        const TapWalk& walk, int k_valid) const {
    int bytes;
    const int16_t* const src = gathered_chunks(data, g, walk, x0, base_offset, column_ok, bytes);
    const int64_t step = int64_t(kRowContigS16KStep) * g.channel_stride;
    const int64_t half = 32 * g.channel_stride;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int k = k_first + kRowContigS16KStep * (j & 3) + 32 * (j >> 2);
      const uint32_t dst = (j < 4 ? dst0 : dst1) + 512u * (j & 3);
      const int16_t* chunk_src = src + (j >> 2) * half + (j & 3) * step;
      cp_async_16(slot + dst, chunk_src, k_valid == kWgmmaStageK || k < k_valid ? bytes : 0);
    }
  }
};

}  // namespace wgmma_detail
}  // namespace flexkit::backend::cuda::gemm_kernels
