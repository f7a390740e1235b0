// The end of a tile in the sm_90a GEMM kernels: the byte-product accumulators combined exactly in
// int64 and finished into the output, a split-K workspace or a stream-K slot.
#pragma once
#include <cstdint>

#include "backend/cuda/gemm/gemm_kernel_args.cuh"
#include "backend/cuda/gemm/gemm_wgmma.hpp"
#include "backend/cuda/gemm/wgmma_int8.cuh"

namespace flexkit::backend::cuda::gemm_kernels {
namespace wgmma_detail {

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
  auto position = [&](int index, int& r, int& c) {
    r = columns_fastest ? index / kTileN : index & ((1 << line_shift) - 1);
    c = columns_fastest ? index % kTileN : index >> line_shift;
    return r < rows_a && c < rows_b;
  };
  portable::GemmStats stats = portable::gemm_stats_identity();
  if (!split && partial == nullptr) {
    // The output itself: each thread has the old values of kInFlight elements loaded before it
    // finishes any. One at a time, an accumulating product (beta != 0: every weight gradient)
    // waits out a load per element; the csnn Linear's weight gradient, K = 512 and 12.8 M
    // outputs, took 255 µs where its products need about 37 µs at the measured roof.
    constexpr int kInFlight = 8;
    static_assert(kWgmmaTileM * kTileN % (kInFlight * kWgmmaThreads) == 0 &&
                  (kTileN << 6) % (kInFlight * kWgmmaThreads) == 0);
#pragma unroll 1
    for (int base = threadIdx.x; base < extent; base += kInFlight * kWgmmaThreads) {
      int64_t offset[kInFlight];
      uint32_t old[kInFlight];
      bool valid[kInFlight];
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        int r, c;
        valid[u] = position(base + u * kWgmmaThreads, r, c);
        offset[u] = output_offset(p, batch, row0 + r, col0 + c);
        old[u] = valid[u] ? load_old_output(p, offset[u]) : 0u;
      }
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        int r, c;
        position(base + u * kWgmmaThreads, r, c);
        if (valid[u]) finish_given_old(p, offset[u], tile[r * kPitch + c], old[u], stats);
      }
    }
    commit_block_stats(stats, p.stats);
    return;
  }
#pragma unroll 1
  for (int index = threadIdx.x; index < extent; index += kWgmmaThreads) {
    int r, c;
    if (!position(index, r, c)) continue;
    const int64_t acc = tile[r * kPitch + c];
    if (partial != nullptr) {
      // A stream-K part: its exact sums into its own slot (plain stores, every element inside
      // the matrix; the slot is not cleared beforehand and the finish reads only those), in the
      // order of this pass: row-major, or column-major where the output's rows are unit stride.
      partial[columns_fastest ? r * kTileN + c : c * kWgmmaTileM + r] =
          static_cast<unsigned long long>(acc);
    } else {
      add_partial(p, batch, row0 + r, col0 + c, acc);
    }
  }
}

}  // namespace wgmma_detail
}  // namespace flexkit::backend::cuda::gemm_kernels
