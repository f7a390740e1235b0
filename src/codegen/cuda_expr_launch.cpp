// Launch geometry of a described expression stage: block shapes, grid sizes in waves of resident
// threads, and how far a reduction is split. It depends only on the description and the SM
// count, so a reduction combines in the same order on every run.
#include "codegen/cuda_expr_source.hpp"

#include <algorithm>
#include <cstdint>

namespace flexkit::codegen {

using ir::Op;

std::size_t partial_bytes(Op reduce) {
  switch (reduce) {
    case Op::sum:
    case Op::mean:
      return sizeof(double);
    case Op::argmax:
    case Op::argmin:
      return sizeof(ExprArgPartial);
    default:
      return sizeof(float);
  }
}

namespace {

constexpr std::int64_t kBlockThreads = 256;
// Threads per SM that are resident at once whatever the expression: the kernels' launch bounds
// cap registers at 64 per thread. Grids are sized in waves of this many, so a grid either fits
// one wave (every block runs from the start) or spans several (the last one matters little).
constexpr std::int64_t kResidentThreadsPerSm = 1024;
// Elements a row-reduction thread should cover: enough vector steps to amortise the tree.
constexpr std::int64_t kRowElementsPerThread = 64;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

std::int64_t pow2_at_least(std::int64_t v) {
  std::int64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

// Block shape for combining `width` values per output: a power-of-two number of threads per
// output (at most 256), several outputs per block when narrower than a warp.
LaunchShape row_block(std::int64_t width, std::int64_t outputs, std::int64_t max_threads) {
  LaunchShape s;
  const std::int64_t x = std::clamp<std::int64_t>(pow2_at_least(width), 1, max_threads);
  const std::int64_t y = x <= 32 ? kBlockThreads / x : 1;
  s.block_x = static_cast<unsigned>(x);
  s.block_y = static_cast<unsigned>(y);
  s.grid_x = static_cast<unsigned>(ceil_div(outputs, y));
  return s;
}

// Splits of the reduced length that bring the grid to about one full wave.
// Splits of the reduced length for a grid of `blocks` blocks per split, given how many blocks
// one wave holds: one wave when that fills at least 3/4 of it, else at least four waves.
std::int64_t choose_splits(std::int64_t blocks, std::int64_t wave, std::int64_t max_splits) {
  max_splits = std::clamp<std::int64_t>(max_splits, 1, 65535);
  if (blocks >= 4 * wave) return 1;
  const std::int64_t single = wave / blocks;
  if (single >= 1 && 4 * blocks * single >= 3 * wave) return std::min(single, max_splits);
  return std::min(ceil_div(4 * wave, blocks), max_splits);
}

std::int64_t wave_of(int sms, std::int64_t threads_per_block) {
  return sms * std::max<std::int64_t>(1, kResidentThreadsPerSm / threads_per_block);
}

}  // namespace

ExprLaunch plan_launch(const ExprKernel& k, int multiprocessors) {
  const int sms = std::max(1, multiprocessors);
  ExprLaunch launch;
  launch.args = k.args;
  ExprArgs& a = launch.args;
  switch (k.kind) {
    case KernelKind::ew_contiguous:
    case KernelKind::ew_strided: {
      const std::int64_t work = a.vec > 0 ? a.vec : ceil_div(a.n, 4);
      launch.main.block_x = kBlockThreads;
      launch.main.grid_x = static_cast<unsigned>(
          std::clamp<std::int64_t>(ceil_div(work, kBlockThreads), 1, wave_of(sms, kBlockThreads)));
      a.splits = 1;
      a.grid_x = launch.main.grid_x;
      a.block_x = static_cast<std::int32_t>(launch.main.block_x);
      return launch;
    }
    case KernelKind::reduce_rows: {
      const std::int64_t ept = k.elements_per_thread;
      launch.main = row_block(ceil_div(a.k, kRowElementsPerThread), a.n, 512);
      const std::int64_t per_block = launch.main.block_x * launch.main.block_y;
      std::int64_t splits = choose_splits(launch.main.grid_x, wave_of(sms, per_block),
                                          a.k / (launch.main.block_x * ept * 4));
      a.seg = ceil_div(ceil_div(a.k, splits), ept) * ept;
      a.splits = ceil_div(a.k, a.seg);
      a.vec = k.vector_ok ? 1 : 0;
      launch.main.grid_y = static_cast<unsigned>(a.splits);
      break;
    }
    case KernelKind::reduce_columns: {
      a.vec = k.vector_ok ? 1 : 0;
      const std::int64_t units = a.vec ? a.n / kColumnVector : a.n;
      const std::int64_t bx = std::clamp<std::int64_t>(pow2_at_least(units), 1, 32);
      const std::int64_t by = kBlockThreads / bx;
      launch.main.block_x = static_cast<unsigned>(bx);
      launch.main.block_y = static_cast<unsigned>(by);
      launch.main.grid_x = static_cast<unsigned>(ceil_div(units, bx));
      const std::int64_t splits =
          choose_splits(launch.main.grid_x, wave_of(sms, kBlockThreads), a.k / (by * 8));
      a.seg = ceil_div(a.k, splits);
      a.splits = ceil_div(a.k, a.seg);
      launch.main.grid_y = static_cast<unsigned>(a.splits);
      launch.main.shared_bytes =
          static_cast<unsigned>(kBlockThreads * kColumnVector * partial_bytes(*k.reduce));
      break;
    }
  }
  a.grid_x = launch.main.grid_x;
  a.block_x = static_cast<std::int32_t>(launch.main.block_x);
  launch.combine_args = a;
  if (a.splits > 1) {
    launch.combine = row_block(a.splits, a.n, kBlockThreads);
    launch.combine_args.grid_x = launch.combine.grid_x;
    launch.combine_args.block_x = static_cast<std::int32_t>(launch.combine.block_x);
    launch.partials = a.n * a.splits;
  }
  return launch;
}

}  // namespace flexkit::codegen
