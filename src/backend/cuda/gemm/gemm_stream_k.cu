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

constexpr int kStreamKFinishLines = 8;  // rows (or columns) of a tile per block: 1024 elements
constexpr int kStreamKFinishBatch = 4;  // parts whose words are loaded before any is added

// Blocks of kStreamKFinishLines lines of one shared tile each (a tile alone per block left most
// of the machine idle: 64 blocks of 256 threads for a 3×3 C256 14×14 layer). A slot holds its
// tile row-major, or column-major where the output's rows are unit stride (parked that way by
// finish_tile): consecutive threads read consecutive words and write along the output's unit
// stride either way. The parts' words are loaded kStreamKFinishBatch parts at a time, so their
// latencies overlap (integer sums: the order does not change the total).
__global__ void __launch_bounds__(kStreamKFinishThreads)
    gemm_finish_stream_k_kernel(const __grid_constant__ IntegerGemmArgs p) {
  using namespace wgmma_detail;
  static_assert(kWgmmaTileM == kWgmmaTileN, "a slot's lines are 128 long either way");
  const int64_t shared_tile = blockIdx.x;
  WorkItem w;
  decode_tile(p, p.sk_first_tile + shared_tile, w);
  const int64_t row0 = w.tile_m * kWgmmaTileM, col0 = w.tile_n * kWgmmaTileN;
  const int64_t rows = p.m - row0 < kWgmmaTileM ? p.m - row0 : kWgmmaTileM;
  const int64_t cols = p.n - col0 < kWgmmaTileN ? p.n - col0 : kWgmmaTileN;
  const bool by_columns = rows_are_unit_stride(p.c);
  const int first_line = static_cast<int>(blockIdx.y) * kStreamKFinishLines;
  const int64_t shared_tiles = p.sk_tiles - p.sk_first_tile;
  const int64_t stages = (p.k + kWgmmaStageK - 1) / kWgmmaStageK;
  const portable::StreamKTileParts parts =
      portable::stream_k_tile_parts(shared_tiles, stages, p.sk_ctas, shared_tile);
  constexpr int kPerThread = kStreamKFinishLines * kWgmmaTileN / kStreamKFinishThreads;
  const int first = first_line * kWgmmaTileN + threadIdx.x;
  int64_t total[kPerThread] = {};
  for (int64_t cta = parts.first_cta; cta <= parts.last_cta; cta += kStreamKFinishBatch) {
    unsigned long long words[kStreamKFinishBatch][kPerThread];
#pragma unroll
    for (int j = 0; j < kStreamKFinishBatch; ++j) {
      const bool has = cta + j <= parts.last_cta;
      const unsigned long long* const slot =
          p.workspace + (has ? portable::stream_k_slot(shared_tiles, stages, p.sk_ctas, p.sk_parts,
                                                       cta + j, shared_tile)
                             : 0) *
                            kStreamKSliceElements;
#pragma unroll
      for (int k = 0; k < kPerThread; ++k)
        words[j][k] = has ? slot[first + k * kStreamKFinishThreads] : 0ull;
    }
#pragma unroll
    for (int j = 0; j < kStreamKFinishBatch; ++j)
#pragma unroll
      for (int k = 0; k < kPerThread; ++k) total[k] += static_cast<int64_t>(words[j][k]);
  }
  portable::GemmStats stats = portable::gemm_stats_identity();
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int i = first + k * kStreamKFinishThreads;
    const int line = i / kWgmmaTileN, along = i % kWgmmaTileN;
    const int r = by_columns ? along : line, c = by_columns ? line : along;
    if (r < rows && c < cols) finish_element(p, w.batch, row0 + r, col0 + c, total[k], stats);
  }
  commit_block_stats(stats, p.stats);
}
static_assert(kWgmmaTileM % kStreamKFinishLines == 0 &&
              kStreamKFinishLines * kWgmmaTileN % kStreamKFinishThreads == 0);

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
  const dim3 grid(static_cast<unsigned>(shared_tiles), kWgmmaTileM / kStreamKFinishLines);
  gemm_finish_stream_k_kernel<<<grid, kStreamKFinishThreads, 0, stream>>>(args);
  FLEXKIT_CUDA_CHECK_LAUNCH("gemm_finish_stream_k_kernel");
}

}  // namespace flexkit::backend::cuda::gemm_kernels
