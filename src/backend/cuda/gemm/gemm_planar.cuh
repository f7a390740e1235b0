// The planar exact integer GEMM kernel (sm_90a): both operands arrive already split into byte
// planes in global memory (gemm_planes.cu: a signed-high and an unsigned-low plane per int16
// operand, a u8 operand as it is), so the main loop does nothing but move tiles and multiply.
//
// Why: the in-kernel split of gemm_wgmma.cuh costs each of its 8 warps ≈ 150 of ≈ 350
// instructions per 64-deep stage, and that instruction stream, not the tensor cores, bounds it.
// Splitting once per call reads and writes each operand once (O(m·k + n·k) bytes against
// O(m·n·k) products); the products then run at the rate the tensor cores and the copies allow.
//
// Pipeline: a ring of `p.raw_stages` slots, each one stage of 64 k-bytes of every plane
// (A high, A low, B high[, B low]) in the 64-byte swizzled K-major layout wgmma reads, filled by
// TMA boxes (one thread issues four bulk copies per stage). Slot s has a "full" barrier (the
// copies' bytes) and an "empty" one (one arrival per warp once its wgmmas of that stage are
// done). Iteration s: wait full(s); issue the stage's wgmmas; wait until at most one wgmma group
// is pending (stage s − 1 done) and arrive on empty(s − 1); thread 0 refills the slot of stage
// s − 2 with stage s − 2 + R (waiting for empty(s − 2), which every warp passed an iteration
// ago, so thread 0 rarely waits). R − 2 stages are in flight ahead of the multiplies.
//
// Tiles, accumulators and the end of the tile are those of the lean kernel (grouped_tile,
// finish_tile): two warpgroups of 64 rows × kTileN columns, three int32 accumulators (two for a
// u8 B), split K as there.
#pragma once
#include <cuda.h>

#include <cstdint>

#include "backend/cuda/gemm/gemm_wgmma.cuh"
#include "backend/cuda/gemm/tma_pipeline.cuh"

namespace flexkit::backend::cuda::gemm_kernels {

// The operands' tensor maps, 4-D over (k bytes, rows, plane, batch entry).
struct PlanarMaps {
  CUtensorMap a;
  CUtensorMap b;
};

namespace planar_detail {

inline constexpr int kMaxRing = 8;
__host__ __device__ constexpr int stage_bytes(bool b_is_u8, int tile_n) {
  return 2 * kWgmmaTileM * kWgmmaStageK + (b_is_u8 ? 1 : 2) * tile_n * kWgmmaStageK;
}
__host__ __device__ constexpr int ring_stages(bool b_is_u8, int tile_n) {
  const int fit =
      (wgmma_detail::kSmemLimit - wgmma_detail::kAlignSlack) / stage_bytes(b_is_u8, tile_n);
  return fit < kMaxRing ? fit : kMaxRing;
}
// The general end of a tile parks the int64 accumulators in the same shared memory.
__host__ __device__ constexpr int smem_bytes(bool b_is_u8, int tile_n, int ring) {
  const int ring_bytes = ring * stage_bytes(b_is_u8, tile_n);
  const int tile_bytes = wgmma_detail::accumulator_tile_bytes(tile_n);
  return (ring_bytes > tile_bytes ? ring_bytes : tile_bytes) + wgmma_detail::kAlignSlack;
}

}  // namespace planar_detail

template <bool kBIsU8, int kTileN>
__global__ void __launch_bounds__(kWgmmaThreads, 1)
    gemm_wgmma_planar_kernel(const __grid_constant__ IntegerGemmArgs p,
                             const __grid_constant__ PlanarMaps maps) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace wgmma_detail;
  static_assert(kTileN == kWgmmaTileN || (kBIsU8 && kTileN == kWideTileN), "tile widths");
  constexpr int kAPlane = kWgmmaTileM * kWgmmaStageK;
  constexpr int kBPlane = kTileN * kWgmmaStageK;
  constexpr int kAHi = 0, kALo = kAPlane, kBHi = 2 * kAPlane, kBLo = 2 * kAPlane + kBPlane;
  constexpr uint32_t kStageBytes = planar_detail::stage_bytes(kBIsU8, kTileN);
  constexpr int kAccs = kTileN / 2;
  constexpr uint32_t kWarps = kWgmmaThreads / 32;
  const int ring = p.raw_stages;

  extern __shared__ unsigned char smem_raw[];
  __shared__ uint64_t full[planar_detail::kMaxRing], empty[planar_detail::kMaxRing];
  const uint32_t raw_address = tma::shared_address(smem_raw);
  unsigned char* const smem = smem_raw + ((1024u - (raw_address & 1023u)) & 1023u);
  const uint32_t smem_address = tma::shared_address(smem);
  const uint32_t full0 = tma::shared_address(&full[0]);
  const uint32_t empty0 = tma::shared_address(&empty[0]);

  int64_t tile_m, tile_n;
  grouped_tile(blockIdx.x, p.tiles_m, p.tiles_n, tile_m, tile_n);
  const int64_t batch = p.batch_offset + blockIdx.z;
  const int64_t row0 = tile_m * kWgmmaTileM;
  const int64_t col0 = tile_n * kTileN;
  const int64_t k_begin = int64_t(blockIdx.y) * p.k_chunk;
  const int64_t k_end = p.k < k_begin + p.k_chunk ? p.k : k_begin + p.k_chunk;
  const int stage_count = static_cast<int>((k_end - k_begin + kWgmmaStageK - 1) / kWgmmaStageK);
  const int rows_a = static_cast<int>(p.m - row0 < kWgmmaTileM ? p.m - row0 : kWgmmaTileM);
  const int rows_b = static_cast<int>(p.n - col0 < kTileN ? p.n - col0 : kTileN);
  // A map over an operand shared by every batch entry (batch stride 0) has a single entry.
  const int32_t a_batch = p.a.batch_stride == 0 ? 0 : static_cast<int32_t>(batch);
  const int32_t b_batch = p.b.batch_stride == 0 ? 0 : static_cast<int32_t>(batch);

  // Stage g of this CTA: k = k_begin + 64·g. A split's K range ends on a multiple of 64 or at
  // K, where the maps' extent zero-fills the rest of the box.
  auto issue_stage = [&](int stage, uint32_t slot) {
    const uint32_t dst = smem_address + slot * kStageBytes;
    const uint32_t barrier = full0 + 8 * slot;
    tma::arrive_expect_bytes(barrier, kStageBytes);
    const int32_t k = static_cast<int32_t>(k_begin + int64_t(stage) * kWgmmaStageK);
    tma::load_4d(dst + kAHi, &maps.a, k, int32_t(row0), 0, a_batch, barrier);
    tma::load_4d(dst + kALo, &maps.a, k, int32_t(row0), 1, a_batch, barrier);
    tma::load_4d(dst + kBHi, &maps.b, k, int32_t(col0), 0, b_batch, barrier);
    if constexpr (!kBIsU8) tma::load_4d(dst + kBLo, &maps.b, k, int32_t(col0), 1, b_batch, barrier);
  };

  if (threadIdx.x == 0) {
    tma::prefetch_map(&maps.a);
    tma::prefetch_map(&maps.b);
    for (int slot = 0; slot < ring; ++slot) {
      tma::barrier_init(full0 + 8 * slot, 1);
      tma::barrier_init(empty0 + 8 * slot, kWarps);
    }
    tma::barrier_init_fence();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int stage = 0; stage < ring && stage < stage_count; ++stage) {
      issue_stage(stage, uint32_t(stage));
    }
  }

  PlaneDescriptors desc;
  desc.init(smem_address, kAHi, kALo, kBHi, kBLo);

  uint32_t acc_hi[kAccs], acc_mid[kAccs], acc_lo[kAccs];
#pragma unroll
  for (int i = 0; i < kAccs; ++i) acc_hi[i] = acc_lo[i] = 0;
  if constexpr (!kBIsU8) {
#pragma unroll
    for (int i = 0; i < kAccs; ++i) acc_mid[i] = 0;
  }

  const bool warp_leader = (threadIdx.x & 31) == 0;
  // Ring positions of stage s (slot, phase parity) and of stages s − 1 and s − 2.
  uint32_t slot = 0, phase = 0;
  uint32_t slot_prev = 0;
  uint32_t slot_refill = 0, phase_refill = 0;
#pragma unroll 1
  for (int stage = 0; stage < stage_count; ++stage) {
    tma::wait(full0 + 8 * slot, phase);
    wgmma::fence();
    plane_stage_wgmmas<kBIsU8, kTileN>(desc, (slot * kStageBytes) >> 4, acc_hi, acc_mid, acc_lo);
    wgmma::commit_group();
    wgmma::wait_group<1>();
    if (stage > 0 && warp_leader) tma::arrive(empty0 + 8 * slot_prev);
    if (stage >= 2) {
      if (threadIdx.x == 0 && stage - 2 + ring < stage_count) {
        tma::wait(empty0 + 8 * slot_refill, phase_refill);
        issue_stage(stage - 2 + ring, slot_refill);
      }
      if (++slot_refill == uint32_t(ring)) {
        slot_refill = 0;
        phase_refill ^= 1;
      }
    }
    slot_prev = slot;
    if (++slot == uint32_t(ring)) {
      slot = 0;
      phase ^= 1;
    }
  }
  finish_tile<kBIsU8, kTileN>(p, smem, acc_hi, acc_mid, acc_lo, batch, row0, col0, rows_a, rows_b);
#elif defined(__CUDA_ARCH__)
  __trap();  // the PTX fallback: never launched (prepare_planar reports false)
#endif
}

namespace planar_detail {

template <bool kBIsU8, int kTileN>
bool prepare() {
  return prepare_sm90_kernel(gemm_wgmma_planar_kernel<kBIsU8, kTileN>,
                             smem_bytes(kBIsU8, kTileN, ring_stages(kBIsU8, kTileN)));
}

template <bool kBIsU8, int kTileN>
void launch(dim3 grid, const IntegerGemmArgs& args, const PlanarMaps& maps, cudaStream_t stream) {
  gemm_wgmma_planar_kernel<kBIsU8, kTileN>
      <<<grid, kWgmmaThreads, smem_bytes(kBIsU8, kTileN, args.raw_stages), stream>>>(args, maps);
  FLEXKIT_CUDA_CHECK_LAUNCH("gemm_wgmma_planar_kernel");
}

}  // namespace planar_detail
}  // namespace flexkit::backend::cuda::gemm_kernels
