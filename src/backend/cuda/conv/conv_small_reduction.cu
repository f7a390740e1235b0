// The small-reduction convolution kernels (conv_small_reduction.cuh).
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "backend/cuda/check.hpp"
#include "backend/cuda/conv/conv_small_reduction.cuh"

namespace flexkit::conv {
namespace {

using namespace direct;
using backend::cannot;
using backend::kCanImplement;

// fprop: output channels per block (its filter slice in shared memory).
constexpr int kFpropChannels = 16;
// update: reduction terms per block, 32 per thread: enough to repay the block's sums.
constexpr std::int64_t kUpdateSliceTerms = 32 * kThreads;

// Geometry's helpers are host code; these are their device forms.
__device__ __forceinline__ int taps_of(const Geometry& g) {
  return static_cast<int>(g.flt[0] * g.flt[1] * g.flt[2]);
}
__device__ __forceinline__ std::int64_t columns_of(const Geometry& g) {
  return g.out[0] * g.out[1] * g.out[2] * g.N;
}

// Where reduction row j = c·T·R·S + tap reads, as one block keeps it: the tap's displacement along
// each dim and the input channel's offset.
template <int kRows>
struct Rows {
  int shift[3][kRows];
  std::int64_t channel[kRows];
};

template <int kRows>
__device__ __forceinline__ void describe_rows(const Args& a, Rows<kRows>& rows, int count) {
  const Geometry& g = a.g;
  const int R = static_cast<int>(g.flt[1]), S = static_cast<int>(g.flt[2]);
  const int taps = taps_of(g);
  for (int j = static_cast<int>(threadIdx.x); j < count; j += kThreads) {
    const int c = j / taps, tap = j % taps;
    rows.shift[0][j] = (tap / (R * S)) * static_cast<int>(g.dil[0]);
    rows.shift[1][j] = ((tap / S) % R) * static_cast<int>(g.dil[1]);
    rows.shift[2][j] = (tap % S) * static_cast<int>(g.dil[2]);
    rows.channel[j] = c * a.x.stride[0];
  }
}

// Column (position, n) of the output (fprop) or of the reduction (update): its batch entry, the
// output position's coordinates, and where the position's window starts in the input.
struct Column {
  int n, m, p, q;
  int start[3];
};

__device__ __forceinline__ Column column_at(const Geometry& g, int col) {
  const int N = static_cast<int>(g.N), P = static_cast<int>(g.out[1]),
            Q = static_cast<int>(g.out[2]);
  Column c;
  c.n = col % N;
  const int pos = col / N;
  c.m = pos / (P * Q);
  c.p = (pos / Q) % P;
  c.q = pos % Q;
  c.start[0] = c.m * static_cast<int>(g.str[0]) - static_cast<int>(g.pad[0]);
  c.start[1] = c.p * static_cast<int>(g.str[1]) - static_cast<int>(g.pad[1]);
  c.start[2] = c.q * static_cast<int>(g.str[2]) - static_cast<int>(g.pad[2]);
  return c;
}

// The input values of a column's rows (0 where a tap reads padding) into registers.
template <int kRows, typename TI>
__device__ __forceinline__ void gather(const Args& a, const Rows<kRows>& rows, int count,
                                       const Column& c, std::int32_t (&v)[kRows]) {
  const Geometry& g = a.g;
  const std::int64_t* si = a.x.stride;
  const TI* base = static_cast<const TI*>(a.x.data) + c.n * si[4];
#pragma unroll
  for (int j = 0; j < kRows; ++j) {
    v[j] = 0;
    if (j < count) {
      const int x0 = c.start[0] + rows.shift[0][j], x1 = c.start[1] + rows.shift[1][j],
                x2 = c.start[2] + rows.shift[2][j];
      if (x0 >= 0 && x0 < g.in[0] && x1 >= 0 && x1 < g.in[1] && x2 >= 0 && x2 < g.in[2])
        v[j] = load(base + rows.channel[j] + x0 * si[1] + x1 * si[2] + x2 * si[3]);
    }
  }
}

// O[k, column] for kFpropChannels output channels k of blockIdx.y and the column of each thread.
template <typename TI>
__global__ void __launch_bounds__(kThreads) small_fprop_kernel(const __grid_constant__ Args a) {
  constexpr int kRows = static_cast<int>(kSmallReductionMax);
  __shared__ Rows<kRows> rows;
  __shared__ std::int32_t filter[kRows][kFpropChannels];
  const Geometry& g = a.g;
  const int count = static_cast<int>(g.C * taps_of(g));
  const int taps = taps_of(g);
  const int R = static_cast<int>(g.flt[1]), S = static_cast<int>(g.flt[2]);
  const int k0 = static_cast<int>(blockIdx.y) * kFpropChannels;
  describe_rows(a, rows, count);
  const auto* flt = static_cast<const std::int16_t*>(a.y.data);
  const std::int64_t* sf = a.y.stride;
  for (int i = static_cast<int>(threadIdx.x); i < count * kFpropChannels; i += kThreads) {
    const int j = i / kFpropChannels, kk = i % kFpropChannels, k = k0 + kk;
    const int c = j / taps, tap = j % taps;
    filter[j][kk] = k < g.K ? flt[c * sf[0] + (tap / (R * S)) * sf[1] + ((tap / S) % R) * sf[2] +
                                  (tap % S) * sf[3] + k * sf[4]]
                            : 0;
  }
  __syncthreads();
  GemmStats stats = portable::gemm_stats_identity();
  const int col = static_cast<int>(blockIdx.x) * kThreads + static_cast<int>(threadIdx.x);
  if (col < columns_of(g)) {
    std::int32_t v[kRows];
    gather<kRows, TI>(a, rows, count, column_at(g, col), v);
    const int channels = static_cast<int>(g.K - k0 < kFpropChannels ? g.K - k0 : kFpropChannels);
    for (int kk = 0; kk < channels; ++kk) {
      std::int64_t acc = 0;
#pragma unroll
      for (int j = 0; j < kRows; ++j)
        if (j < count) mac(acc, v[j], filter[j][kk]);
      finish(a, k0 + kk, col, acc, stats);
    }
  }
  backend::cuda::commit_block_stats(stats, a.stats);
}

// Block (slice, channel group): partials[(row·K + k)·slices + slice] = Σ over the slice's terms
// (position, n) of I[c, x(position, tap), n] · E[k, position, n], for every row = c·T·R·S + tap
// and each of the group's kChannels output channels k. Integer sums: their order does not matter.
template <typename TI, int kRows, int kChannels>
__global__ void __launch_bounds__(kThreads) small_update_kernel(const __grid_constant__ Args a) {
  __shared__ Rows<kRows> rows;
  __shared__ std::int64_t warp_sums[kThreads / 32][kChannels * kRows];
  const Geometry& g = a.g;
  const int count = static_cast<int>(g.C * taps_of(g));
  describe_rows(a, rows, count);
  __syncthreads();
  const int k0 = static_cast<int>(blockIdx.y) * kChannels;
  const int channels = static_cast<int>(g.K - k0 < kChannels ? g.K - k0 : kChannels);
  const std::int64_t* se = a.y.stride;
  const auto* grad = static_cast<const std::int16_t*>(a.y.data);
  const int terms = static_cast<int>(columns_of(g));
  const int j0 = static_cast<int>(blockIdx.x * a.slice_terms);
  const int j1 = static_cast<int>(terms - j0 < a.slice_terms ? terms : j0 + a.slice_terms);
  std::int64_t acc[kChannels][kRows] = {};
  for (int j = j0 + static_cast<int>(threadIdx.x); j < j1; j += kThreads) {
    const Column c = column_at(g, j);
    std::int32_t v[kRows];
    gather<kRows, TI>(a, rows, count, c, v);
    const std::int16_t* e = grad + c.m * se[1] + c.p * se[2] + c.q * se[3] + c.n * se[4];
#pragma unroll
    for (int kk = 0; kk < kChannels; ++kk) {
      if (kk >= channels) break;
      const std::int32_t ek = e[(k0 + kk) * se[0]];
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        if (r < count) mac(acc[kk][r], v[r], ek);
    }
  }
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
#pragma unroll
  for (int kk = 0; kk < kChannels; ++kk)
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r >= count) break;
      std::int64_t s = acc[kk][r];
      for (int offset = 16; offset > 0; offset >>= 1)
        s += static_cast<std::int64_t>(
            __shfl_down_sync(0xffffffffu, static_cast<long long>(s), offset));
      if (lane == 0) warp_sums[warp][kk * kRows + r] = s;
    }
  __syncthreads();
  auto* partials = static_cast<std::int64_t*>(a.partials);
  for (int i = static_cast<int>(threadIdx.x); i < channels * count; i += kThreads) {
    const int kk = i / count, r = i % count;
    std::int64_t total = 0;
    for (int w = 0; w < kThreads / 32; ++w) total += warp_sums[w][kk * kRows + r];
    partials[(static_cast<std::int64_t>(r) * g.K + k0 + kk) * a.slices + blockIdx.x] = total;
  }
}

template <typename TI>
void launch_fprop(const Args& a, cudaStream_t s) {
  const Geometry& g = a.g;
  const dim3 grid(static_cast<unsigned>(ceil_div(g.out_positions() * g.N, kThreads)),
                  static_cast<unsigned>(ceil_div(g.K, kFpropChannels)));
  small_fprop_kernel<TI><<<grid, kThreads, 0, s>>>(a);
  FLEXKIT_CUDA_CHECK_LAUNCH("conv small_fprop_kernel");
}

template <typename TI, int kRows, int kChannels>
void launch_update(Args a, cudaStream_t s, int device) {
  const Geometry& g = a.g;
  const std::int64_t rows = g.C * g.taps();
  a.slice_terms = kUpdateSliceTerms;
  a.slices = ceil_div(g.out_positions() * g.N, kUpdateSliceTerms);
  backend::cuda::Scratch partials(
      device, static_cast<std::size_t>(rows * g.K * a.slices) * sizeof(std::int64_t));
  a.partials = partials.get();
  const dim3 grid(static_cast<unsigned>(a.slices), static_cast<unsigned>(ceil_div(g.K, kChannels)));
  small_update_kernel<TI, kRows, kChannels><<<grid, kThreads, 0, s>>>(a);
  FLEXKIT_CUDA_CHECK_LAUNCH("conv small_update_kernel");
  update_finish_kernel<std::int64_t><<<grid_for_items(rows * g.K, device), kThreads, 0, s>>>(a);
  FLEXKIT_CUDA_CHECK_LAUNCH("conv update_finish_kernel");
}

// Up to 16 rows, four output channels a block; up to 32, two (64 accumulators a thread).
template <typename TI>
void launch_update(const Args& a, cudaStream_t s, int device) {
  if (a.g.C * a.g.taps() <= 16) return launch_update<TI, 16, 4>(a, s, device);
  return launch_update<TI, 32, 2>(a, s, device);
}

}  // namespace

backend::CanImplement small_reduction_fits(ImplicitDirection direction, const ConvProblem& p) {
  if (direction == ImplicitDirection::bprop) return cannot("bprop");
  if (p.x.kind == gemm::ElementKind::f32) return cannot("f32 operands");
  const Geometry& g = p.g;
  if (g.C * g.taps() > kSmallReductionMax) return cannot("more than 32 filter values a channel");
  if (g.upscale_phases() != 1) return cannot("an upscale");
  if (g.out_positions() * g.N > INT_MAX) return cannot("2^31 columns or more");
  if (ceil_div(g.K, direction == ImplicitDirection::fprop ? kFpropChannels : 2) > 65535)
    return cannot("too many output channels for the grid");
  for (int d = 0; d < 3; ++d)
    if (g.in[d] > INT_MAX / 4 || g.pad[d] > INT_MAX / 4 || g.str[d] > INT_MAX / 4 ||
        g.dil[d] * g.flt[d] > INT_MAX / 4)
      return cannot("a geometry past 32-bit indices");
  return kCanImplement;
}

void run_small_reduction(ImplicitDirection direction, Args a, cudaStream_t stream, int device) {
  const bool u8 = a.x.kind == gemm::ElementKind::u8;
  if (direction == ImplicitDirection::fprop) {
    if (u8) return launch_fprop<std::uint8_t>(a, stream);
    return launch_fprop<std::int16_t>(a, stream);
  }
  if (u8) return launch_update<std::uint8_t>(a, stream, device);
  return launch_update<std::int16_t>(a, stream, device);
}

}  // namespace flexkit::conv
