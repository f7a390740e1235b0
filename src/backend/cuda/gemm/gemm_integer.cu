// Host dispatch of the exact integer GEMM on CUDA (gemm_integer_cuda): argument checks, the simple
// kernel (any arch, any strides), the split-K finish kernels, and the launches of the kernel the
// shape class's plan chose (gemm_plan.cu: the sm_90a wgmma kernels when the device and the
// operands' layout allow them).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "backend/cuda/check.hpp"
#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/gemm/gemm_integer.hpp"
#include "backend/cuda/gemm/gemm_kernel_args.cuh"
#include "backend/cuda/gemm/gemm_plan.hpp"
#include "backend/cuda/gemm/gemm_planar.hpp"
#include "backend/cuda/gemm/gemm_wgmma.hpp"
#include "backend/cuda/launch_support.hpp"
#include "flexkit/error.hpp"

namespace flexkit::backend::cuda::gemm_kernels {

namespace {

// The simple kernel: a kSimpleTile (64) square output tile per 256-thread block, K in steps of 16
// through shared memory, int64 accumulators (a product of two int16 fits int32, so each step is
// exact).
constexpr int kSimpleDepth = 16;
constexpr int kSimpleThreads = 256;
constexpr int64_t kMaxGridZ = 65535;

__device__ __forceinline__ int32_t load_operand(const OperandView& v, bool is_u8, int64_t batch,
                                                int64_t row, int64_t k) {
  const int64_t offset = batch * v.batch_stride + row * v.row_stride + k * v.k_stride;
  if (is_u8) return static_cast<const uint8_t*>(v.data)[offset];
  return static_cast<const int16_t*>(v.data)[offset];
}

// a_k_fastest / b_k_fastest: which index consecutive threads walk when filling a tile, chosen by
// the host so that loads along a unit stride coalesce.
__global__ void __launch_bounds__(kSimpleThreads)
    gemm_simple_kernel(const __grid_constant__ IntegerGemmArgs p, int a_k_fastest,
                       int b_k_fastest) {
  __shared__ int32_t a_tile[kSimpleDepth][kSimpleTile + 1];
  __shared__ int32_t b_tile[kSimpleDepth][kSimpleTile + 1];
  const int tid = threadIdx.x;
  const int tx = tid % 16;
  const int ty = tid / 16;
  const int64_t tile_m = int64_t(blockIdx.x) / p.tiles_n;
  const int64_t tile_n = int64_t(blockIdx.x) % p.tiles_n;
  const int64_t batch = p.batch_offset + blockIdx.z;
  const int64_t row0 = tile_m * kSimpleTile;
  const int64_t col0 = tile_n * kSimpleTile;

  int64_t acc[4][4] = {};
  for (int64_t k0 = 0; k0 < p.k; k0 += kSimpleDepth) {
    for (int e = tid; e < kSimpleDepth * kSimpleTile; e += kSimpleThreads) {
      int kk = a_k_fastest ? e % kSimpleDepth : e / kSimpleTile;
      int rr = a_k_fastest ? e / kSimpleDepth : e % kSimpleTile;
      a_tile[kk][rr] = (row0 + rr < p.m && k0 + kk < p.k)
                           ? load_operand(p.a, false, batch, row0 + rr, k0 + kk)
                           : 0;
      kk = b_k_fastest ? e % kSimpleDepth : e / kSimpleTile;
      rr = b_k_fastest ? e / kSimpleDepth : e % kSimpleTile;
      b_tile[kk][rr] = (col0 + rr < p.n && k0 + kk < p.k)
                           ? load_operand(p.b, p.b_is_u8, batch, col0 + rr, k0 + kk)
                           : 0;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kSimpleDepth; ++kk) {
      int32_t av[4], bv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        av[i] = a_tile[kk][ty + 16 * i];
        bv[i] = b_tile[kk][tx + 16 * i];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += int64_t(av[i] * bv[j]);
    }
    __syncthreads();
  }

  portable::GemmStats stats = portable::gemm_stats_identity();
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t row = row0 + ty + 16 * i;
      const int64_t col = col0 + tx + 16 * j;
      if (row < p.m && col < p.n) finish_element(p, batch, row, col, acc[i][j], stats);
    }
  commit_block_stats(stats, p.stats);
}

// Sets `words` (even) int64 words at `clear` to zeros, 16 bytes a store, spread over the grid: a
// finishing pass does it before it waits for its kernel (alternating_workspace.hpp).
__device__ __forceinline__ void clear_stale_sums(unsigned long long* clear, uint32_t words) {
  for (uint32_t i = 2 * (blockIdx.x * blockDim.x + threadIdx.x); i < words;
       i += 2 * gridDim.x * blockDim.x)
    *reinterpret_cast<ulonglong2*>(clear + i) = make_ulonglong2(0ull, 0ull);
}

// After a split-K wgmma run: every output's exact total is in the workspace (at split_index:
// consecutive threads take consecutive words, and so consecutive output elements). `clear`: see
// clear_stale_sums.
__global__ void __launch_bounds__(kFinishThreads)
    gemm_finish_splits_kernel(const __grid_constant__ IntegerGemmArgs p, int64_t total,
                              unsigned long long* clear, uint32_t clear_words) {
  clear_stale_sums(clear, clear_words);
  wait_for_prerequisite_grid();  // a dependent launch (launch_finish_splits) starts early
  portable::GemmStats stats = portable::gemm_stats_identity();
  const bool by_columns = rows_are_unit_stride(p.c);
  const int64_t inner = by_columns ? p.m : p.n, outer = by_columns ? p.n : p.m;
  for (int64_t i = int64_t(blockIdx.x) * kFinishThreads + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * kFinishThreads) {
    const int64_t along = i % inner;
    const int64_t rest = i / inner;
    const int64_t line = rest % outer, batch = rest / outer;
    const int64_t sum = static_cast<int64_t>(p.workspace[i]);
    finish_element(p, batch, by_columns ? along : line, by_columns ? line : along, sum, stats);
  }
  commit_block_stats(stats, p.stats, p.stats_host, p.stats_arrivals);
}

// The same pass where every output takes the common epilogue (finishes_by_right_shift) and a line
// of the workspace is a whole number of 16-byte pairs (its length a multiple of four, at most
// 2^31 words in all): each thread takes four consecutive words of one line with two 16-byte
// loads, rounds them without branches, stores them with one 8-byte store where the line is the
// output's unit stride, and reduces only max |m| and the clamped count (commit_block_store_stats).
// The general pass divides in int64 per element, takes the general epilogue and shuffles all six
// fields of the record. Measured on the H200 (1x1 56x56 update, the deep-K kernel's adds switched
// off so that the pass is what changes): 0.0416–0.0420 → 0.0407 ms a call for either layer.
constexpr int kFinishPerThread = 4;
// The shifted passes' loop: words first, first + step, … (each the first of four, below total)
// of the workspace, rounded into the output; their statistics into max_abs and saturated.
__device__ __forceinline__ void finish_shifted_words(const IntegerGemmArgs& p, uint32_t first,
                                                     uint32_t step, uint32_t total,
                                                     uint32_t& max_abs, uint32_t& saturated) {
  const bool by_columns = rows_are_unit_stride(p.c);
  const uint32_t inner = static_cast<uint32_t>(by_columns ? p.m : p.n);
  const uint32_t outer = static_cast<uint32_t>(by_columns ? p.n : p.m);
  const int64_t along_stride = by_columns ? p.c.row_stride : p.c.col_stride;
  const int64_t line_stride = by_columns ? p.c.col_stride : p.c.row_stride;
  for (uint32_t i = first; i < total; i += step) {
    const uint32_t along = i % inner, rest = i / inner;
    const uint32_t line = rest % outer, batch = rest / outer;
    const ulonglong2* const at = reinterpret_cast<const ulonglong2*>(p.workspace + i);
    const ulonglong2 low = at[0], high = at[1];
    const int64_t sums[kFinishPerThread] = {
        static_cast<int64_t>(low.x), static_cast<int64_t>(low.y), static_cast<int64_t>(high.x),
        static_cast<int64_t>(high.y)};
    int16_t* const out = static_cast<int16_t*>(p.c.data) + int64_t(batch) * p.c.batch_stride +
                         int64_t(line) * line_stride + int64_t(along) * along_stride;
    finish_four_shifted(p, out, along_stride, kFinishPerThread, sums, max_abs, saturated);
  }
}
__global__ void __launch_bounds__(kFinishThreads)
    gemm_finish_splits_shifted_kernel(const __grid_constant__ IntegerGemmArgs p, uint32_t total,
                                      unsigned long long* clear, uint32_t clear_words) {
  uint32_t max_abs = 0, saturated = 0;
  clear_stale_sums(clear, clear_words);
  wait_for_prerequisite_grid();  // a dependent launch (launch_finish_splits) starts early
  finish_shifted_words(p, (blockIdx.x * kFinishThreads + threadIdx.x) * kFinishPerThread,
                       gridDim.x * kFinishThreads * kFinishPerThread, total, max_abs, saturated);
  commit_block_store_stats(max_abs, saturated, p.stats, p.stats_host, p.stats_arrivals);
}

// The shifted pass for a small output whose statistics it publishes itself (args.stats_arrivals
// set): one cluster of blocks, which reduce the record in distributed shared memory, so that its
// first block publishes it without the blocks' atomics and arrival counter (each of them a round
// trip to L2 at the end of the call's critical path). Measured on the H200 (1x1 56x56 update, ms a
// call, same process, alternating): C64 K256 0.0413–0.0417 → 0.0399–0.0407, C256 K64
// 0.0407–0.0411 → 0.0396–0.0401.
constexpr int kClusterFinishBlocks = 8;  // a portable cluster size
constexpr int kClusterFinishThreads = 512;
constexpr int64_t kClusterFinishMaxOutputs = 4 * kClusterFinishBlocks * kClusterFinishThreads;

// (Defined only where the kernel below uses it: the host pass would warn of an unused function.)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ void cluster_sync_all() {
  asm volatile(
      "barrier.cluster.arrive.release.aligned;\n"
      "barrier.cluster.wait.acquire.aligned;\n" ::
          : "memory");
}
#endif

__global__ void __launch_bounds__(kClusterFinishThreads)
    gemm_finish_splits_cluster_kernel(const __grid_constant__ IntegerGemmArgs p, uint32_t total,
                                      unsigned long long* clear, uint32_t clear_words) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __shared__ uint32_t block_stats[2];
  uint32_t max_abs = 0, saturated = 0;
  clear_stale_sums(clear, clear_words);
  wait_for_prerequisite_grid();
  // The record as the call's earlier kernels left it, read while the sums load.
  const bool publisher = blockIdx.x == 0 && threadIdx.x == 0;
  portable::GemmStats record{};
  if (publisher) record = load_record_from_l2(p.stats);
  finish_shifted_words(p, (blockIdx.x * kClusterFinishThreads + threadIdx.x) * kFinishPerThread,
                       kClusterFinishBlocks * kClusterFinishThreads * kFinishPerThread, total,
                       max_abs, saturated);
  const BlockStoreStats block = reduce_block_store_stats(max_abs, saturated);
  if (threadIdx.x == 0) {
    block_stats[0] = block.max_abs_m;
    // At most kClusterFinishMaxOutputs values a cluster: the block's count fits in 32 bits.
    block_stats[1] = static_cast<uint32_t>(block.saturated);
  }
  cluster_sync_all();
  if (publisher) {
    const uint32_t local = static_cast<uint32_t>(__cvta_generic_to_shared(block_stats));
    for (uint32_t rank = 0; rank < kClusterFinishBlocks; ++rank) {
      uint32_t remote, block_max, block_saturated;
      asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(rank));
      asm volatile("ld.shared::cluster.u32 %0, [%1];\n" : "=r"(block_max) : "r"(remote));
      asm volatile("ld.shared::cluster.u32 %0, [%1];\n" : "=r"(block_saturated) : "r"(remote + 4));
      const int32_t m = static_cast<int32_t>(block_max);
      record.max_abs_m = m > record.max_abs_m ? m : record.max_abs_m;
      record.saturated += block_saturated;
    }
    // No system-scope fence: the host reads the copy only after an event behind this kernel.
    *p.stats_host = record;
    *p.stats = portable::gemm_stats_identity();
  }
  // The other blocks' shared memory stays until the first block has read it.
  cluster_sync_all();
#endif
}

std::string describe(const gemm::GemmProblem& p) {
  return "gemm_integer_cuda(batch " + std::to_string(p.batch) + ", m " + std::to_string(p.m) +
         ", n " + std::to_string(p.n) + ", k " + std::to_string(p.k) + ")";
}

void check_problem(const gemm::GemmProblem& p, const portable::GemmStats* device_stats) {
  using gemm::ElementKind;
  if (p.batch < 1 || p.m < 1 || p.n < 1 || p.k < 1)
    throw ShapeError(describe(p) + ": every extent must be at least 1");
  if (p.a.kind != ElementKind::flex16)
    throw DTypeError(describe(p) + ": A must be flex16 (int16 mantissas)");
  if (p.b.kind != ElementKind::flex16 && p.b.kind != ElementKind::u8)
    throw DTypeError(describe(p) + ": B must be flex16 or u8");
  const bool out_f32 = p.epilogue.out_kind == portable::GemmOutKind::f32;
  if (p.c.kind != (out_f32 ? ElementKind::f32 : ElementKind::flex16))
    throw DTypeError(describe(p) + ": C's element kind does not match the epilogue's out_kind");
  if (!p.a.data || !p.b.data ||
      (!p.c.data && (p.mode == gemm::EpilogueMode::store || p.epilogue.reads_old)))
    throw ValueError(describe(p) + ": null operand pointer");
  if (device_stats == nullptr) throw ValueError(describe(p) + ": null statistics pointer");
  if (p.mode == gemm::EpilogueMode::measure && out_f32 && p.epilogue.reads_old)
    throw ValueError(describe(p) +
                     ": measure mode with beta != 0 needs a flex16 output (the old value enters "
                     "the measured range as a mantissa)");
}

}  // namespace

bool device_is_sm90(int device) {
  static std::mutex mutex;
  static std::map<int, bool> known;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = known.find(device); it != known.end()) return it->second;
  int major = 0, minor = 0;
  FLEXKIT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  FLEXKIT_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  const bool sm90 = major == 9 && minor == 0;  // sm_90a code runs on compute capability 9.0 only
  known.emplace(device, sm90);
  return sm90;
}

WgmmaKSplit wgmma_k_split(int64_t k, int64_t ctas, int sms) {
  // Split K when one CTA's range would break the int32 exactness bound, and when too few tiles
  // would leave multiprocessors idle (each split still gets ≥ 16 stages of work).
  int64_t splits = ceil_div(k, kWgmmaMaxChunkK);
  if (ctas < sms) {
    // As many splits as fill whole waves (of one CTA per multiprocessor), not one more: a
    // second, nearly empty wave costs as long as the first.
    const int64_t waves = ceil_div(splits * ctas, sms);
    const int64_t wanted = std::max<int64_t>(1, waves * sms / ctas);
    const int64_t useful = std::max<int64_t>(1, k / (16 * kWgmmaStageK));
    splits = std::max(splits, std::min(wanted, useful));
  }
  const int64_t k_chunk = ceil_div(ceil_div(k, splits), kWgmmaStageK) * kWgmmaStageK;
  return {ceil_div(k, k_chunk), k_chunk};
}

void launch_finish_splits(const IntegerGemmArgs& args, int64_t outputs, int device,
                          cudaStream_t stream, unsigned long long* clear, std::size_t clear_words) {
  const bool by_columns = rows_are_unit_stride(args.c);
  const int64_t inner = by_columns ? args.m : args.n;
  const bool dependent = device_is_sm90(device);
  const uint32_t clear_count = static_cast<uint32_t>(clear_words);
  if (dependent && args.stats_arrivals != nullptr && finishes_by_right_shift(args) &&
      inner % kFinishPerThread == 0 && outputs <= kClusterFinishMaxOutputs) {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(kClusterFinishBlocks);
    config.blockDim = dim3(kClusterFinishThreads);
    config.stream = stream;
    cudaLaunchAttribute attributes[2]{};
    attributes[0].id = cudaLaunchAttributeClusterDimension;
    attributes[0].val.clusterDim.x = kClusterFinishBlocks;
    attributes[0].val.clusterDim.y = 1;
    attributes[0].val.clusterDim.z = 1;
    attributes[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[1].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attributes;
    config.numAttrs = 2;
    FLEXKIT_CUDA_CHECK(cudaLaunchKernelEx(&config, gemm_finish_splits_cluster_kernel, args,
                                          static_cast<uint32_t>(outputs), clear, clear_count));
    return;
  }
  if (finishes_by_right_shift(args) && inner % kFinishPerThread == 0 && outputs <= INT32_MAX) {
    const int64_t per_block = int64_t(kFinishThreads) * kFinishPerThread;
    const unsigned blocks = static_cast<unsigned>(
        std::min<int64_t>(ceil_div(outputs, per_block), int64_t(multiprocessors(device)) * 8));
    launch_dependent(dependent, gemm_finish_splits_shifted_kernel, dim3(blocks),
                     dim3(kFinishThreads), 0, stream, args, static_cast<uint32_t>(outputs), clear,
                     clear_count);
    return;
  }
  const unsigned blocks = static_cast<unsigned>(
      std::min<int64_t>(ceil_div(outputs, kFinishThreads), int64_t(multiprocessors(device)) * 8));
  launch_dependent(dependent, gemm_finish_splits_kernel, dim3(blocks), dim3(kFinishThreads), 0,
                   stream, args, outputs, clear, clear_count);
}

}  // namespace flexkit::backend::cuda::gemm_kernels

namespace flexkit::gemm {

const backend::HeavyOpPlan& gemm_integer_cuda_plan(const GemmProblem& problem, int device) {
  namespace gk = backend::cuda::gemm_kernels;
  backend::cuda::DeviceGuard guard(device);  // the plan asks the current device
  return gk::plan_for(gk::plan_key(problem, device));
}

void gemm_integer_cuda(const GemmProblem& problem, int device, void* stream,
                       portable::GemmStats* device_stats) {
  namespace gk = backend::cuda::gemm_kernels;
  gk::check_problem(problem, device_stats);
  backend::cuda::DeviceGuard guard(device);
  const cudaStream_t cuda_stream = static_cast<cudaStream_t>(stream);
  const bool b_is_u8 = problem.b.kind == ElementKind::u8;

  // B is seen transposed (n × k) so that both operands are "rows × k" to the kernels.
  const gk::OperandView a{problem.a.data, problem.a.row_stride, problem.a.col_stride,
                          problem.a.batch_stride};
  const gk::OperandView b{problem.b.data, problem.b.col_stride, problem.b.row_stride,
                          problem.b.batch_stride};
  const int64_t m = problem.m, n = problem.n;
  const gk::OutputView c{problem.c.data, problem.c.row_stride, problem.c.col_stride,
                         problem.batch == 1 ? 0 : problem.c.batch_stride};
  const gk::PlanKey key = gk::plan_key(problem, device);
  const gk::Plan& plan = gk::plan_for(key);

  gk::IntegerGemmArgs args{};
  args.m = m;
  args.n = n;
  args.k = problem.k;
  args.a = gk::normalised(a, m, problem.k, problem.batch);
  args.b = gk::normalised(b, n, problem.k, problem.batch);
  args.c = c;
  args.epilogue = problem.epilogue;
  args.b_is_u8 = b_is_u8;
  args.out_is_f32 = key.out_is_f32;
  args.measure = key.measure;
  args.splits = plan.splits;
  args.k_chunk = plan.k_chunk;
  args.raw_stages = plan.raw_stages;
  args.tiles_m = static_cast<int32_t>(plan.tiles_m);
  args.tiles_n = static_cast<int32_t>(plan.tiles_n);
  args.stats = device_stats;

  const unsigned tiles = static_cast<unsigned>(plan.tiles_m * plan.tiles_n);
  if (plan.kind == gk::KernelKind::simple) {
    // Consecutive threads walk K when K has the smaller stride (usually the unit one).
    const auto abs64 = [](int64_t x) { return x < 0 ? -x : x; };
    const int a_k_fastest = abs64(args.a.k_stride) <= abs64(args.a.row_stride);
    const int b_k_fastest = abs64(args.b.k_stride) <= abs64(args.b.row_stride);
    for (int64_t b0 = 0; b0 < problem.batch; b0 += gk::kMaxGridZ) {
      args.batch_offset = b0;
      const dim3 grid(tiles, 1, static_cast<unsigned>(std::min(gk::kMaxGridZ, problem.batch - b0)));
      gk::gemm_simple_kernel<<<grid, gk::kSimpleThreads, 0, cuda_stream>>>(args, a_k_fastest,
                                                                           b_k_fastest);
      FLEXKIT_CUDA_CHECK_LAUNCH("gemm_simple_kernel");
    }
    return;
  }

  // The workspace goes back to the caching allocator as soon as the launches are queued: it
  // hands the block out again only on this stream, after these kernels (launch_support.hpp).
  backend::cuda::Scratch workspace(device, plan.workspace_bytes);
  if (plan.splits > 1) {
    args.workspace = static_cast<unsigned long long*>(workspace.get());
    FLEXKIT_CUDA_CHECK(cudaMemsetAsync(workspace.get(), 0, plan.workspace_bytes, cuda_stream));
  }
  // The planar kernel's operands: A always split into its two planes, B too unless it is a u8
  // operand the kernel can read in place. The planes are scratch, like the workspace.
  gk::PlanarOperand a_planes, b_planes;
  const bool b_in_place = plan.kind == gk::KernelKind::planar && b_is_u8 &&
                          gk::planar_in_place(args.b, n, problem.k, problem.batch, b_planes);
  backend::cuda::Scratch a_scratch(
      device, plan.kind == gk::KernelKind::planar
                  ? gk::planar_bytes(m, problem.k, args.a.batch_stride == 0 ? 1 : problem.batch, 2)
                  : 0);
  backend::cuda::Scratch b_scratch(
      device, plan.kind == gk::KernelKind::planar && !b_in_place
                  ? gk::planar_bytes(n, problem.k, args.b.batch_stride == 0 ? 1 : problem.batch,
                                     b_is_u8 ? 1 : 2)
                  : 0);
  if (plan.kind == gk::KernelKind::planar) {
    a_planes = gk::split_into_planes(args.a, false, m, problem.k, problem.batch, a_scratch.get(),
                                     cuda_stream);
    if (!b_in_place)
      b_planes = gk::split_into_planes(args.b, b_is_u8, n, problem.k, problem.batch,
                                       b_scratch.get(), cuda_stream);
    // From here on the kernel reads the planes; it asks the views only whether an operand is
    // shared by every batch entry (batch stride 0).
    args.a.batch_stride = a_planes.entries == 1 ? 0 : a_planes.batch_stride;
    args.b.batch_stride = b_planes.entries == 1 ? 0 : b_planes.batch_stride;
  }
  for (int64_t b0 = 0; b0 < problem.batch; b0 += gk::kMaxGridZ) {
    args.batch_offset = b0;
    const dim3 grid(tiles, static_cast<unsigned>(plan.splits),
                    static_cast<unsigned>(std::min(gk::kMaxGridZ, problem.batch - b0)));
    if (plan.kind == gk::KernelKind::planar) {
      gk::launch_planar(b_is_u8, plan.variant.tile_n, grid, args, a_planes, b_planes, cuda_stream);
    } else {
      gk::launch_wgmma(plan.variant, grid, args, cuda_stream);
    }
  }
  if (plan.splits > 1) {
    args.batch_offset = 0;
    const int64_t total = problem.batch * m * n;
    gk::gemm_finish_splits_kernel<<<plan.finish_blocks, gk::kFinishThreads, 0, cuda_stream>>>(
        args, total, nullptr, 0);
    FLEXKIT_CUDA_CHECK_LAUNCH("gemm_finish_splits_kernel");
  }
}

}  // namespace flexkit::gemm
