// CPU fprop and bprop: blocks of output positions lowered into GEMM operands and run through
// gemm_cpu, each block with the whole reduction (see conv_cpu.hpp).
#include "conv/conv_cpu.hpp"

#include <algorithm>
#include <memory>
#include <type_traits>

#include "backend/cpu/thread_pool.hpp"
#include "conv/conv_lower.hpp"
#include "gemm/gemm_cpu.hpp"

namespace flexkit::conv {
namespace {

using gemm::ElementKind;
using portable::GemmStats;

template <typename T>
constexpr ElementKind kind_of() {
  if constexpr (std::is_same_v<T, float>) return ElementKind::f32;
  if constexpr (std::is_same_v<T, std::int16_t>) return ElementKind::flex16;
  return ElementKind::u8;
}

gemm::OutputRef advance(gemm::OutputRef r, std::int64_t elements) {
  const std::int64_t bytes = elements * (r.kind == ElementKind::f32 ? 4 : 2);
  r.data = static_cast<char*>(r.data) + bytes;
  return r;
}

// How many positions (each N columns) one lowered block of `rows` rows may cover.
std::int64_t block_positions(std::int64_t rows, std::int64_t N, std::int64_t positions,
                             std::size_t element_bytes) {
  const std::int64_t per_position = rows * N * static_cast<std::int64_t>(element_bytes);
  return std::clamp<std::int64_t>(kLoweredBlockBytes / per_position, 1, positions);
}

// Lowered rows of gradient E for bprop, row = ((k·taps + tap)·phases + phase) where the phase
// (u0, u1, u2) picks one of the up³ upscaled copies of an input element; columns = input
// positions [p0, p1) (row-major over D, H, W) × N. Summing the copies inside the reduction keeps
// the whole gradient one exact sum.
template <typename T>
void lower_gradient(const Geometry& g, const Operand& e, std::int64_t r0, std::int64_t r1,
                    std::int64_t p0, std::int64_t p1, T* dst, std::int64_t ld) {
  const T* base = operand_data<T>(e);
  const std::int64_t taps = g.taps(), phases = g.upscale_phases(), N = g.N;
  const std::int64_t H = g.in[1], W = g.in[2];
  for (std::int64_t row = r0; row < r1; ++row) {
    const std::int64_t k = row / (taps * phases), tap = (row / phases) % taps, ph = row % phases;
    const std::int64_t t = tap / (g.flt[1] * g.flt[2]), r = (tap / g.flt[2]) % g.flt[1],
                       s = tap % g.flt[2];
    const std::int64_t u0 = ph / (g.up[1] * g.up[2]), u1 = (ph / g.up[2]) % g.up[1],
                       u2 = ph % g.up[2];
    T* out = dst + (row - r0) * ld;
    const T* channel = base + k * e.stride[0];
    std::int64_t w = p0 % W, h = (p0 / W) % H, d = p0 / (H * W);
    for (std::int64_t pos = p0; pos < p1; ++pos, out += N) {
      const std::int64_t o0 = output_index(g, 0, d, u0, t), o1 = output_index(g, 1, h, u1, r),
                         o2 = output_index(g, 2, w, u2, s);
      if (o0 < 0 || o1 < 0 || o2 < 0) {
        zero_run(out, N);
      } else {
        copy_run(out, channel + o0 * e.stride[1] + o1 * e.stride[2] + o2 * e.stride[3], e.stride[4],
                 N);
      }
      if (++w == W) {
        w = 0;
        if (++h == H) {
          h = 0;
          ++d;
        }
      }
    }
  }
}

// F[c, t, r, s, k] for each filter element, in (c, tap, k) order.
template <typename T, typename Body>
void for_each_filter_element(const Geometry& g, const Operand& f, Body body) {
  const T* base = operand_data<T>(f);
  for (std::int64_t c = 0; c < g.C; ++c)
    for (std::int64_t t = 0; t < g.flt[0]; ++t)
      for (std::int64_t r = 0; r < g.flt[1]; ++r)
        for (std::int64_t s = 0; s < g.flt[2]; ++s) {
          const std::int64_t tap = (t * g.flt[1] + r) * g.flt[2] + s;
          const T* e = base + c * f.stride[0] + t * f.stride[1] + r * f.stride[2] + s * f.stride[3];
          for (std::int64_t k = 0; k < g.K; ++k) body(c, tap, k, e[k * f.stride[4]]);
        }
}

template <typename T>
std::unique_ptr<T[]> scratch(std::int64_t count) {
  return std::make_unique_for_overwrite<T[]>(
      static_cast<std::size_t>(std::max<std::int64_t>(count, 1)));
}

// Runs one lowered block: out block = A · B.
GemmStats run_block(const ConvProblem& pr, std::int64_t m, std::int64_t n, std::int64_t k,
                    const gemm::MatrixRef& a, const gemm::MatrixRef& b, gemm::OutputRef c) {
  gemm::GemmProblem gp;
  gp.m = m;
  gp.n = n;
  gp.k = k;
  gp.a = a;
  gp.b = b;
  gp.c = c;
  gp.epilogue = pr.epilogue;
  gp.mode = pr.mode;
  gp.alpha = pr.alpha;
  gp.beta = pr.beta;
  return gemm::gemm_cpu(gp);
}

// TF: filter elements (int16 or float); TI: input elements (int16, uint8 or float).
template <typename TF, typename TI>
GemmStats fprop_typed(const ConvProblem& pr) {
  const Geometry& g = pr.g;
  const std::int64_t rows = g.C * g.taps(), positions = g.out_positions(), N = g.N;
  // Fᵀ as K × (C·T·R·S), rows matching lower_input's.
  auto filter = scratch<TF>(g.K * rows);
  for_each_filter_element<TF>(g, pr.y, [&](std::int64_t c, std::int64_t tap, std::int64_t k, TF v) {
    filter[k * rows + c * g.taps() + tap] = v;
  });
  const std::int64_t per_block = block_positions(rows, N, positions, sizeof(TI));
  auto lowered = scratch<TI>(rows * per_block * N);
  GemmStats total = portable::gemm_stats_identity();
  for (std::int64_t p0 = 0; p0 < positions; p0 += per_block) {
    const std::int64_t p1 = std::min(positions, p0 + per_block), cols = (p1 - p0) * N;
    backend::cpu::parallel_for(rows, std::max<std::int64_t>(1, kLowerElementsPerWorker / cols),
                               [&](std::int64_t b, std::int64_t e) {
                                 lower_input<TI>(g, pr.x, b, e, p0, p1, lowered.get() + b * cols,
                                                 cols);
                               });
    const GemmStats s = run_block(pr, g.K, cols, rows, {filter.get(), kind_of<TF>(), rows, 1, 0},
                                  {lowered.get(), kind_of<TI>(), cols, 1, 0},
                                  advance(pr.out, p0 * N * pr.out.col_stride));
    portable::gemm_stats_merge(total, s);
  }
  return total;
}

template <typename T>
GemmStats bprop_typed(const ConvProblem& pr) {
  const Geometry& g = pr.g;
  const std::int64_t phases = g.upscale_phases();
  const std::int64_t rows = g.K * g.taps() * phases, positions = g.in_positions(), N = g.N;
  // F as C × (K·T·R·S·phases), rows matching lower_gradient's; each phase repeats the tap.
  auto filter = scratch<T>(g.C * rows);
  for_each_filter_element<T>(g, pr.x, [&](std::int64_t c, std::int64_t tap, std::int64_t k, T v) {
    T* dst = filter.get() + c * rows + (k * g.taps() + tap) * phases;
    std::fill(dst, dst + phases, v);
  });
  const std::int64_t per_block = block_positions(rows, N, positions, sizeof(T));
  auto lowered = scratch<T>(rows * per_block * N);
  GemmStats total = portable::gemm_stats_identity();
  for (std::int64_t p0 = 0; p0 < positions; p0 += per_block) {
    const std::int64_t p1 = std::min(positions, p0 + per_block), cols = (p1 - p0) * N;
    backend::cpu::parallel_for(rows, std::max<std::int64_t>(1, kLowerElementsPerWorker / cols),
                               [&](std::int64_t b, std::int64_t e) {
                                 lower_gradient<T>(g, pr.y, b, e, p0, p1, lowered.get() + b * cols,
                                                   cols);
                               });
    const GemmStats s = run_block(pr, g.C, cols, rows, {filter.get(), kind_of<T>(), rows, 1, 0},
                                  {lowered.get(), kind_of<T>(), cols, 1, 0},
                                  advance(pr.out, p0 * N * pr.out.col_stride));
    portable::gemm_stats_merge(total, s);
  }
  return total;
}

}  // namespace

GemmStats fprop_cpu(const ConvProblem& pr) {
  switch (pr.x.kind) {
    case ElementKind::f32:
      return fprop_typed<float, float>(pr);
    case ElementKind::flex16:
      return fprop_typed<std::int16_t, std::int16_t>(pr);
    case ElementKind::u8:
      break;
  }
  return fprop_typed<std::int16_t, std::uint8_t>(pr);
}

GemmStats bprop_cpu(const ConvProblem& pr) {
  if (pr.x.kind == ElementKind::f32) return bprop_typed<float>(pr);
  return bprop_typed<std::int16_t>(pr);
}

std::size_t fprop_workspace_bytes(const Geometry& g, std::size_t element_bytes) {
  const std::int64_t rows = g.C * g.taps();
  const std::int64_t per_block = block_positions(rows, g.N, g.out_positions(), element_bytes);
  return static_cast<std::size_t>(rows * (per_block * g.N + g.K)) * element_bytes;
}

std::size_t bprop_workspace_bytes(const Geometry& g, std::size_t element_bytes) {
  const std::int64_t rows = g.K * g.taps() * g.upscale_phases();
  const std::int64_t per_block = block_positions(rows, g.N, g.in_positions(), element_bytes);
  return static_cast<std::size_t>(rows * (per_block * g.N + g.C)) * element_bytes;
}

}  // namespace flexkit::conv
