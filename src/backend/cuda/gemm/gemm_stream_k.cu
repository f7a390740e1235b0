// Stream-K scheduling of the lean implicit-GEMM kernels: the plan (host) and the finish of the
// shared tiles (a kernel). The kernel side of the schedule is stream_k_item in gemm_wgmma.cuh.
#include "backend/cuda/gemm/gemm_stream_k.hpp"

#include "backend/cuda/check.hpp"
#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/exact_stats_commit.cuh"
#include "backend/cuda/gemm/gemm_wgmma.cuh"
#include "flexkit/portable/stream_k.hpp"

namespace flexkit::backend::cuda::gemm_kernels {
namespace {

constexpr int kStreamKFinishThreads = 256;
constexpr int kStreamKFinishPerThread = 4;  // consecutive words: two 16-byte loads a part
constexpr int kStreamKFinishElements = kStreamKFinishThreads * kStreamKFinishPerThread;
constexpr int kStreamKFinishBatch = 4;   // parts whose words are loaded before any is added
constexpr int kStreamKFinishTable = 64;  // parts whose slots one pass of the table holds

// What a block needs of the schedule, worked out once (int64 divisions) by its first threads.
struct FinishSetup {
  int64_t batch, row0, col0, rows, cols;
  int64_t first_cta, last_cta;
};

// Blocks of kStreamKFinishElements consecutive words (8 lines) of one shared tile each. A slot
// holds its tile row-major, or column-major where the output's rows are unit stride (parked that
// way by finish_tile): consecutive threads read consecutive words and write along the output's
// unit stride either way. The schedule (int64 divisions) is worked out once per block, the slots'
// places a part per thread, before the wait for the stream-K kernel; then every thread loads
// kStreamKFinishBatch parts' words at a time, 16 bytes a load, so that their latencies overlap
// (integer sums: the order does not change the total). Measured on the H200 (3×3 C256 14×14
// update, 36 shared tiles of 4-5 parts): the former form, each thread dividing for every part,
// loading 8-byte words and taking the general epilogue per element, took 12.9 µs; with this form
// and the dependent launch the update went from 0.107 to 0.099 ms per call.
__global__ void __launch_bounds__(kStreamKFinishThreads, 4)
    gemm_finish_stream_k_kernel(const __grid_constant__ IntegerGemmArgs p) {
  using namespace wgmma_detail;
  static_assert(kWgmmaTileM == kWgmmaTileN, "a slot's lines are 128 long either way");
  __shared__ FinishSetup setup;
  __shared__ int64_t slot_word[kStreamKFinishTable];
  const int64_t shared_tile = blockIdx.x;
  const int64_t shared_tiles = p.sk_tiles - p.sk_first_tile;
  const int64_t stages = (p.k + kWgmmaStageK - 1) / kWgmmaStageK;
  if (threadIdx.x == 0) {
    WorkItem w;
    decode_tile(p, p.sk_first_tile + shared_tile, w);
    const portable::StreamKTileParts parts =
        portable::stream_k_tile_parts(shared_tiles, stages, p.sk_ctas, shared_tile);
    const int64_t row0 = w.tile_m * kWgmmaTileM, col0 = w.tile_n * kWgmmaTileN;
    setup = {w.batch,
             row0,
             col0,
             p.m - row0 < kWgmmaTileM ? p.m - row0 : kWgmmaTileM,
             p.n - col0 < kWgmmaTileN ? p.n - col0 : kWgmmaTileN,
             parts.first_cta,
             parts.last_cta};
  }
  __syncthreads();
  const FinishSetup s = setup;
  auto fill_table = [&](int64_t table, int count) {
    if (static_cast<int>(threadIdx.x) < count)
      slot_word[threadIdx.x] = portable::stream_k_slot(shared_tiles, stages, p.sk_ctas, p.sk_parts,
                                                       table + threadIdx.x, shared_tile) *
                               kStreamKSliceElements;
  };
  auto table_count = [&](int64_t table) {
    return static_cast<int>(s.last_cta - table + 1 < kStreamKFinishTable ? s.last_cta - table + 1
                                                                         : kStreamKFinishTable);
  };
  fill_table(s.first_cta, table_count(s.first_cta));
  // Everything above reads only the arguments; the slots are the stream-K kernel's.
  wait_for_prerequisite_grid();
  const int first = static_cast<int>(blockIdx.y) * kStreamKFinishElements +
                    static_cast<int>(threadIdx.x) * kStreamKFinishPerThread;
  int64_t total[kStreamKFinishPerThread] = {};
  for (int64_t table = s.first_cta; table <= s.last_cta; table += kStreamKFinishTable) {
    const int count = table_count(table);
    if (table != s.first_cta) {
      __syncthreads();  // the previous pass has read the table
      fill_table(table, count);
    }
    __syncthreads();
    for (int j0 = 0; j0 < count; j0 += kStreamKFinishBatch) {
      ulonglong2 words[kStreamKFinishBatch][2];
#pragma unroll
      for (int j = 0; j < kStreamKFinishBatch; ++j) {
        if (j0 + j < count) {
          const ulonglong2* const at =
              reinterpret_cast<const ulonglong2*>(p.workspace + slot_word[j0 + j] + first);
          words[j][0] = __ldcs(at);  // read once: evict first
          words[j][1] = __ldcs(at + 1);
        } else {
          words[j][0] = words[j][1] = make_ulonglong2(0ull, 0ull);
        }
      }
#pragma unroll
      for (int j = 0; j < kStreamKFinishBatch; ++j) {
        total[0] += static_cast<int64_t>(words[j][0].x);
        total[1] += static_cast<int64_t>(words[j][0].y);
        total[2] += static_cast<int64_t>(words[j][1].x);
        total[3] += static_cast<int64_t>(words[j][1].y);
      }
    }
  }
  const bool by_columns = rows_are_unit_stride(p.c);
  const int line = first / kWgmmaTileN, along = first % kWgmmaTileN;  // 4 | 128: one line
  if (finishes_by_right_shift(p)) {
    const int64_t r = by_columns ? along : line, c = by_columns ? line : along;
    const int64_t line_extent = by_columns ? s.cols : s.rows;
    const int64_t along_extent = by_columns ? s.rows : s.cols;
    uint32_t max_abs = 0, saturated = 0;
    if (line < line_extent && along < along_extent) {
      int16_t* const out = static_cast<int16_t*>(p.c.data) + s.batch * p.c.batch_stride +
                           (s.row0 + r) * p.c.row_stride + (s.col0 + c) * p.c.col_stride;
      const int64_t along_stride = by_columns ? p.c.row_stride : p.c.col_stride;
      finish_four_shifted(p, out, along_stride, along_extent - along, total, max_abs, saturated);
    }
    commit_block_store_stats(max_abs, saturated, p.stats);
  } else {
    portable::GemmStats stats = portable::gemm_stats_identity();
#pragma unroll
    for (int k = 0; k < kStreamKFinishPerThread; ++k) {
      const int r = by_columns ? along + k : line, c = by_columns ? line : along + k;
      if (r < s.rows && c < s.cols)
        finish_element(p, s.batch, s.row0 + r, s.col0 + c, total[k], stats);
    }
    commit_block_stats(stats, p.stats);
  }
}
static_assert(kWgmmaTileM * kWgmmaTileN % kStreamKFinishElements == 0 &&
              kStreamKFinishElements % kWgmmaTileN == 0);

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
  const dim3 grid(static_cast<unsigned>(shared_tiles),
                  kWgmmaTileM * kWgmmaTileN / kStreamKFinishElements);
  // A dependent of the stream-K kernel, which lets it launch from its start.
  launch_dependent(true, gemm_finish_stream_k_kernel, grid, dim3(kStreamKFinishThreads), 0, stream,
                   args);
}

}  // namespace flexkit::backend::cuda::gemm_kernels
