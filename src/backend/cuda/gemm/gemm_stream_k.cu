// Stream-K scheduling of the lean implicit-GEMM kernels: the plan (host) and the finish of the
// shared tiles (a kernel). The kernel side of the schedule is stream_k_item in gemm_wgmma.cuh.
#include "backend/cuda/gemm/gemm_stream_k.hpp"

#include "backend/cuda/check.hpp"
#include "backend/cuda/exact_stats_commit.cuh"
#include "backend/cuda/gemm/gemm_wgmma.cuh"
#include "flexkit/portable/stream_k.hpp"

namespace flexkit::backend::cuda::gemm_kernels {
namespace {

constexpr int kStreamKFinishThreads = 256;

constexpr int kStreamKFinishRows = 8;  // rows of a tile per block: 1024 elements, 4 a thread

// Blocks of kStreamKFinishRows rows of one shared tile each (a tile alone per block left most of
// the machine idle: 64 blocks of 256 threads for a 3×3 C256 14×14 layer), consecutive threads
// along the slice's rows so that they read consecutive words and write along the output's rows.
__global__ void __launch_bounds__(kStreamKFinishThreads)
    gemm_finish_stream_k_kernel(const __grid_constant__ IntegerGemmArgs p) {
  using namespace wgmma_detail;
  const int64_t shared_tile = blockIdx.x;
  WorkItem w;
  decode_tile(p, p.sk_first_tile + shared_tile, w);
  const int64_t row0 = w.tile_m * kWgmmaTileM, col0 = w.tile_n * kWgmmaTileN;
  const int64_t rows = p.m - row0 < kWgmmaTileM ? p.m - row0 : kWgmmaTileM;
  const int64_t cols = p.n - col0 < kWgmmaTileN ? p.n - col0 : kWgmmaTileN;
  const int first_row = static_cast<int>(blockIdx.y) * kStreamKFinishRows;
  const int64_t shared_tiles = p.sk_tiles - p.sk_first_tile;
  const int64_t stages = (p.k + kWgmmaStageK - 1) / kWgmmaStageK;
  const portable::StreamKTileParts parts =
      portable::stream_k_tile_parts(shared_tiles, stages, p.sk_ctas, shared_tile);
  constexpr int kPerThread = kStreamKFinishRows * kWgmmaTileN / kStreamKFinishThreads;
  const int first = first_row * kWgmmaTileN + threadIdx.x;
  int64_t total[kPerThread] = {};
  for (int64_t cta = parts.first_cta; cta <= parts.last_cta; ++cta) {
    const unsigned long long* const slot =
        p.workspace +
        portable::stream_k_slot(shared_tiles, stages, p.sk_ctas, p.sk_parts, cta, shared_tile) *
            kStreamKSliceElements;
#pragma unroll
    for (int k = 0; k < kPerThread; ++k)
      total[k] += static_cast<int64_t>(slot[first + k * kStreamKFinishThreads]);
  }
  portable::GemmStats stats = portable::gemm_stats_identity();
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int i = first + k * kStreamKFinishThreads;
    const int r = i / kWgmmaTileN, c = i % kWgmmaTileN;
    if (r < rows && c < cols) finish_element(p, w.batch, row0 + r, col0 + c, total[k], stats);
  }
  commit_block_stats(stats, p.stats);
}
static_assert(kWgmmaTileM % kStreamKFinishRows == 0 &&
              kStreamKFinishRows * kWgmmaTileN % kStreamKFinishThreads == 0);

}  // namespace

StreamKPlan plan_stream_k(int64_t tiles, int64_t k, int sms) {
  StreamKPlan plan;
  const int64_t stages = (k + kWgmmaStageK - 1) / kWgmmaStageK;
  const portable::StreamKSchedule s =
      portable::stream_k_schedule(tiles, stages, sms, kWgmmaMaxChunkK / kWgmmaStageK);
  if (s.sharing_ctas == 0) return plan;
  plan.ctas = static_cast<int32_t>(s.sharing_ctas);
  plan.first_tile = s.first_shared_tile;
  plan.tiles = tiles;
  plan.parts =
      portable::stream_k_parts_per_cta(tiles - s.first_shared_tile, stages, s.sharing_ctas);
  plan.workspace_bytes = static_cast<std::size_t>(s.sharing_ctas * plan.parts) *
                         wgmma_detail::kStreamKSliceElements * sizeof(std::int64_t);
  return plan;
}

void apply_stream_k(const StreamKPlan& plan, IntegerGemmArgs& args) {
  args.sk_ctas = plan.ctas;
  args.sk_parts = static_cast<int32_t>(plan.parts);
  args.sk_first_tile = plan.first_tile;
  args.sk_tiles = plan.tiles;
  args.splits = 1;
  args.k_chunk = args.k;
}

void launch_finish_stream_k(const IntegerGemmArgs& args, cudaStream_t stream) {
  const int64_t shared_tiles = args.sk_tiles - args.sk_first_tile;
  if (shared_tiles <= 0) return;
  const dim3 grid(static_cast<unsigned>(shared_tiles), kWgmmaTileM / kStreamKFinishRows);
  gemm_finish_stream_k_kernel<<<grid, kStreamKFinishThreads, 0, stream>>>(args);
  FLEXKIT_CUDA_CHECK_LAUNCH("gemm_finish_stream_k_kernel");
}

}  // namespace flexkit::backend::cuda::gemm_kernels
