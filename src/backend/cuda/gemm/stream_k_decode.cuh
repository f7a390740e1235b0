// Which output tile and K range a CTA of the sm_90a GEMM kernels works on: the grouped tile order,
// and the work items of a grid launch or of a stream-K schedule.
#pragma once
#include <cstdint>

#include "backend/cuda/gemm/gemm_kernel_args.cuh"
#include "backend/cuda/gemm/gemm_wgmma.hpp"
#include "flexkit/portable/stream_k.hpp"

namespace flexkit::backend::cuda::gemm_kernels {
namespace wgmma_detail {

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

// One piece of a CTA's work: stages [k_begin, k_end) of one output tile, finished in place
// (partial == nullptr) or added into the tile's int64 slice of the stream-K workspace.
struct WorkItem {
  int64_t batch, tile_m, tile_n;
  int64_t k_begin, k_end;
  unsigned long long* partial;
};
inline constexpr int kStreamKSliceElements = kWgmmaTileM * kWgmmaTileN;

// A work item copied field by field: into or out of a volatile one in shared memory (the lean
// kernel's stream-K items, which no thread keeps in registers across a main loop).
template <typename To, typename From>
__device__ __forceinline__ void copy_work_item(To& to, const From& from) {
  to.batch = from.batch;
  to.tile_m = from.tile_m;
  to.tile_n = from.tile_n;
  to.k_begin = from.k_begin;
  to.k_end = from.k_end;
  to.partial = from.partial;
}

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

}  // namespace wgmma_detail
}  // namespace flexkit::backend::cuda::gemm_kernels
