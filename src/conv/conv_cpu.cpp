// CPU fprop and bprop: blocks of output positions lowered into GEMM operands and run through
// gemm_cpu, each block with the whole reduction (see conv_cpu.hpp).
#include "conv/conv_cpu.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "backend/cpu/gemm_cpu.hpp"
#include "backend/cpu/thread_pool.hpp"
#include "conv/conv_lower.hpp"

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

// bprop gathers: gradI at input position x sums, over the (k, tap, phase) rows, the gradient
// at the output position that reads x through that tap (phase: which of the up³ upscaled copies
// of x). With a stride above 1 a row reaches an output only where (x·up + u + pad − t·dil) is a
// multiple of the stride, which fixes x modulo the stride: the input positions fall into
// str0·str1·str2 residue classes, and each class has its own reaching rows; the others lower to
// zeros for the whole class (about three of four rows for a 3×3 filter at a 2-d stride of 2). So
// each class runs as its own GEMM over its reaching rows only. With stride 1 there is one class
// holding every position and every row.
struct ResidueClass {
  std::int64_t first[3], count[3];
  std::int64_t positions() const { return count[0] * count[1] * count[2]; }
};

ResidueClass residue_class(const Geometry& g, std::int64_t index) {
  ResidueClass rc;
  for (int d = 2; d >= 0; --d) {
    rc.first[d] = index % g.str[d];
    index /= g.str[d];
    rc.count[d] = g.in[d] > rc.first[d] ? (g.in[d] - rc.first[d] + g.str[d] - 1) / g.str[d] : 0;
  }
  return rc;
}

std::int64_t residue_classes(const Geometry& g) {
  return g.str[0] * g.str[1] * g.str[2];
}

// The rows ((k·taps + tap)·phases + phase), in order, that reach an output position from rc.
std::vector<std::int64_t> reaching_rows(const Geometry& g, const ResidueClass& rc) {
  const std::int64_t taps = g.taps(), phases = g.upscale_phases();
  auto reaches = [&](int d, std::int64_t t, std::int64_t u) {
    const std::int64_t num = rc.first[d] * g.up[d] + u + g.pad[d] - t * g.dil[d];
    return ((num % g.str[d]) + g.str[d]) % g.str[d] == 0;
  };
  std::vector<std::int64_t> rows;
  for (std::int64_t k = 0; k < g.K; ++k)
    for (std::int64_t tap = 0; tap < taps; ++tap)
      for (std::int64_t ph = 0; ph < phases; ++ph) {
        const std::int64_t t = tap / (g.flt[1] * g.flt[2]), r = (tap / g.flt[2]) % g.flt[1],
                           s = tap % g.flt[2];
        const std::int64_t u0 = ph / (g.up[1] * g.up[2]), u1 = (ph / g.up[2]) % g.up[1],
                           u2 = ph % g.up[2];
        if (reaches(0, t, u0) && reaches(1, r, u1) && reaches(2, s, u2))
          rows.push_back((k * taps + tap) * phases + ph);
      }
  return rows;
}

// The input position (row-major over D, H, W) of class position j.
std::int64_t class_position(const Geometry& g, const ResidueClass& rc, std::int64_t j) {
  const std::int64_t jw = j % rc.count[2], jh = (j / rc.count[2]) % rc.count[1],
                     jd = j / (rc.count[2] * rc.count[1]);
  const std::int64_t d = rc.first[0] + jd * g.str[0], h = rc.first[1] + jh * g.str[1],
                     w = rc.first[2] + jw * g.str[2];
  return (d * g.in[1] + h) * g.in[2] + w;
}

// Lowered rows [r0, r1) of `rows` of gradient E; columns = class positions [j0, j1) × N.
template <typename T>
void lower_gradient(const Geometry& g, const Operand& e, const ResidueClass& rc,
                    const std::vector<std::int64_t>& rows, std::int64_t r0, std::int64_t r1,
                    std::int64_t j0, std::int64_t j1, T* dst, std::int64_t ld) {
  const T* base = operand_data<T>(e);
  const std::int64_t taps = g.taps(), phases = g.upscale_phases(), N = g.N;
  // Without upscale along W and with E's W and n adjacent in memory, consecutive class positions
  // along W read consecutive output positions (o2 = jw + shift: the class makes the division by
  // the stride exact), so each class row's valid part is one copy, as in lower_input; per-position
  // divisions and N-element copies had made bprop's lowering cost as much as its GEMM at small N.
  const bool runs = g.up[2] == 1 && e.stride[4] == 1 && e.stride[3] == N;
  for (std::int64_t i = r0; i < r1; ++i) {
    const std::int64_t row = rows[static_cast<std::size_t>(i)];
    const std::int64_t k = row / (taps * phases), tap = (row / phases) % taps, ph = row % phases;
    const std::int64_t t = tap / (g.flt[1] * g.flt[2]), r = (tap / g.flt[2]) % g.flt[1],
                       s = tap % g.flt[2];
    const std::int64_t u0 = ph / (g.up[1] * g.up[2]), u1 = (ph / g.up[2]) % g.up[1],
                       u2 = ph % g.up[2];
    T* out = dst + (i - r0) * ld;
    const T* channel = base + k * e.stride[0];
    std::int64_t jw = j0 % rc.count[2], jh = (j0 / rc.count[2]) % rc.count[1],
                 jd = j0 / (rc.count[2] * rc.count[1]);
    if (runs) {
      const std::int64_t num = rc.first[2] + g.pad[2] - s * g.dil[2];  // a multiple of str[2]
      const std::int64_t shift = num >= 0 ? num / g.str[2] : -(-num / g.str[2]);
      for (std::int64_t j = j0; j < j1;) {
        const std::int64_t len = std::min(rc.count[2] - jw, j1 - j);
        const std::int64_t o0 = output_index(g, 0, rc.first[0] + jd * g.str[0], u0, t),
                           o1 = output_index(g, 1, rc.first[1] + jh * g.str[1], u1, r);
        if (o0 < 0 || o1 < 0) {
          zero_run(out, len * N);
        } else {
          // Class positions [jw, jw + len) read outputs from shift + jw, valid below out[2].
          const std::int64_t va = std::clamp(-shift, jw, jw + len),
                             vb = std::clamp(g.out[2] - shift, va, jw + len);
          zero_run(out, (va - jw) * N);
          if (vb > va)
            copy_run(out + (va - jw) * N,
                     channel + o0 * e.stride[1] + o1 * e.stride[2] + (shift + va) * e.stride[3], 1,
                     (vb - va) * N);
          zero_run(out + (vb - jw) * N, (jw + len - vb) * N);
        }
        out += len * N;
        j += len;
        jw += len;
        if (jw == rc.count[2]) {
          jw = 0;
          if (++jh == rc.count[1]) {
            jh = 0;
            ++jd;
          }
        }
      }
      continue;
    }
    for (std::int64_t j = j0; j < j1; ++j, out += N) {
      const std::int64_t o0 = output_index(g, 0, rc.first[0] + jd * g.str[0], u0, t),
                         o1 = output_index(g, 1, rc.first[1] + jh * g.str[1], u1, r),
                         o2 = output_index(g, 2, rc.first[2] + jw * g.str[2], u2, s);
      if (o0 < 0 || o1 < 0 || o2 < 0) {
        zero_run(out, N);
      } else {
        copy_run(out, channel + o0 * e.stride[1] + o1 * e.stride[2] + o2 * e.stride[3], e.stride[4],
                 N);
      }
      if (++jw == rc.count[2]) {
        jw = 0;
        if (++jh == rc.count[1]) {
          jh = 0;
          ++jd;
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

// Runs one lowered block: out block = A · B, on the kernels of `isa`.
GemmStats run_block(const ConvProblem& pr, GemmIsa isa, std::int64_t m, std::int64_t n,
                    std::int64_t k, const gemm::MatrixRef& a, const gemm::MatrixRef& b,
                    gemm::OutputRef c) {
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
  return backend::cpu::gemm_detail::gemm_cpu_with_isa(gp, isa);
}

// TF: filter elements (int16 or float); TI: input elements (int16, uint8 or float).
template <typename TF, typename TI>
GemmStats fprop_typed(const ConvProblem& pr, GemmIsa isa) {
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
    const GemmStats s = run_block(
        pr, isa, g.K, cols, rows, {filter.get(), kind_of<TF>(), rows, 1, 0},
        {lowered.get(), kind_of<TI>(), cols, 1, 0}, advance(pr.out, p0 * N * pr.out.col_stride));
    portable::gemm_stats_merge(total, s);
  }
  return total;
}

// Copies the N elements of each class position [j0, j1) of every gradI row between the output
// and the compact block (to_block: output → block). The positions' offsets are decoded once per
// block, not once per row (three 64-bit divisions each had cost as much as the copies).
void move_class_block(const ConvProblem& pr, const ResidueClass& rc, std::int64_t j0,
                      std::int64_t j1, char* block, bool to_block) {
  const Geometry& g = pr.g;
  const std::int64_t es = pr.out.kind == ElementKind::f32 ? 4 : 2, N = g.N;
  const std::int64_t cols = (j1 - j0) * N, cs = pr.out.col_stride;
  std::vector<std::int64_t> at(static_cast<std::size_t>(j1 - j0));  // element offsets in a row
  for (std::int64_t j = j0; j < j1; ++j)
    at[static_cast<std::size_t>(j - j0)] = class_position(g, rc, j) * N * cs;
  char* const out = static_cast<char*>(pr.out.data);
  const auto run = static_cast<std::size_t>(N * es);
  backend::cpu::parallel_for(
      g.C, std::max<std::int64_t>(1, kLowerElementsPerWorker / std::max<std::int64_t>(cols, 1)),
      [&](std::int64_t c0, std::int64_t c1) {
        for (std::int64_t c = c0; c < c1; ++c) {
          char* const row = out + c * pr.out.row_stride * es;
          char* b = block + c * cols * es;
          for (std::size_t j = 0; j < at.size(); ++j, b += run) {
            char* const o = row + at[j] * es;
            if (cs == 1) {
              std::memcpy(to_block ? b : o, to_block ? o : b, run);
            } else {
              for (std::int64_t n = 0; n < N; ++n)
                std::memcpy(to_block ? b + n * es : o + n * cs * es,
                            to_block ? o + n * cs * es : b + n * es, static_cast<std::size_t>(es));
            }
          }
        }
      });
}

// One class's share of the scratch: its filter columns (none when it keeps every row), its
// lowered block and, when the class is not every position, its compact output block.
struct ClassScratch {
  std::int64_t k, per_block;
  bool own_filter, staged;
};
ClassScratch class_scratch(const Geometry& g, std::int64_t reaching, std::int64_t positions,
                           std::size_t element_bytes) {
  const std::int64_t all_rows = g.K * g.taps() * g.upscale_phases();
  ClassScratch c;
  c.k = std::max<std::int64_t>(1, reaching);  // no reaching row: one zero row (see bprop_typed)
  c.per_block = block_positions(c.k, g.N, positions, element_bytes);
  c.own_filter = reaching != all_rows;
  c.staged = residue_classes(g) > 1;
  return c;
}

template <typename T>
GemmStats bprop_typed(const ConvProblem& pr, GemmIsa isa) {
  const Geometry& g = pr.g;
  const std::int64_t all_rows = g.K * g.taps() * g.upscale_phases(), N = g.N;
  const std::int64_t es = pr.out.kind == ElementKind::f32 ? 4 : 2;
  // F as C × (K·T·R·S·phases), rows matching lower_gradient's; each phase repeats the tap.
  auto filter = scratch<T>(g.C * all_rows);
  for_each_filter_element<T>(g, pr.x, [&](std::int64_t c, std::int64_t tap, std::int64_t k, T v) {
    T* dst = filter.get() + c * all_rows + (k * g.taps() + tap) * g.upscale_phases();
    std::fill(dst, dst + g.upscale_phases(), v);
  });
  GemmStats total = portable::gemm_stats_identity();
  for (std::int64_t ci = 0; ci < residue_classes(g); ++ci) {
    const ResidueClass rc = residue_class(g, ci);
    const std::int64_t positions = rc.positions();
    if (positions == 0) continue;
    const std::vector<std::int64_t> rows = reaching_rows(g, rc);
    const ClassScratch cs =
        class_scratch(g, static_cast<std::int64_t>(rows.size()), positions, sizeof(T));
    const std::int64_t k = cs.k;
    // The class's filter columns; with no reaching row, one zero column, so that the GEMM still
    // finishes every element (0 + beta·old).
    std::unique_ptr<T[]> class_filter;
    if (cs.own_filter) {
      class_filter = scratch<T>(g.C * k);
      for (std::int64_t c = 0; c < g.C; ++c)
        for (std::int64_t i = 0; i < k; ++i)
          class_filter[c * k + i] =
              rows.empty() ? T{} : filter[c * all_rows + rows[static_cast<std::size_t>(i)]];
    }
    const T* const a = cs.own_filter ? class_filter.get() : filter.get();
    auto lowered = scratch<T>(k * cs.per_block * N);
    // A class of every str-th position is not one stride apart in gradI: the GEMM writes a
    // compact block first filled with the old values where the epilogue reads them (beta and
    // the statistics then see exactly what they would in place), copied back after.
    auto block = scratch<char>(cs.staged ? g.C * cs.per_block * N * es : 0);
    const bool reads_old = std::is_same_v<T, float> ? pr.beta != 0.0f : pr.epilogue.reads_old;
    for (std::int64_t j0 = 0; j0 < positions; j0 += cs.per_block) {
      const std::int64_t j1 = std::min(positions, j0 + cs.per_block), cols = (j1 - j0) * N;
      if (rows.empty()) {
        zero_run(lowered.get(), cols);
      } else {
        backend::cpu::parallel_for(k, std::max<std::int64_t>(1, kLowerElementsPerWorker / cols),
                                   [&](std::int64_t b, std::int64_t e) {
                                     lower_gradient<T>(g, pr.y, rc, rows, b, e, j0, j1,
                                                       lowered.get() + b * cols, cols);
                                   });
      }
      if (cs.staged && reads_old) move_class_block(pr, rc, j0, j1, block.get(), true);
      const gemm::OutputRef out = cs.staged ? gemm::OutputRef{block.get(), pr.out.kind, cols, 1, 0}
                                            : advance(pr.out, j0 * N * pr.out.col_stride);
      const GemmStats s =
          run_block(pr, isa, g.C, cols, k, {a, kind_of<T>(), cs.own_filter ? k : all_rows, 1, 0},
                    {lowered.get(), kind_of<T>(), cols, 1, 0}, out);
      portable::gemm_stats_merge(total, s);
      if (cs.staged && pr.mode == gemm::EpilogueMode::store)
        move_class_block(pr, rc, j0, j1, block.get(), false);
    }
  }
  return total;
}

}  // namespace

GemmStats fprop_cpu(const ConvProblem& pr, GemmIsa isa) {
  switch (pr.x.kind) {
    case ElementKind::f32:
      return fprop_typed<float, float>(pr, isa);
    case ElementKind::flex16:
      return fprop_typed<std::int16_t, std::int16_t>(pr, isa);
    case ElementKind::u8:
      break;
  }
  return fprop_typed<std::int16_t, std::uint8_t>(pr, isa);
}

GemmStats bprop_cpu(const ConvProblem& pr, GemmIsa isa) {
  if (pr.x.kind == ElementKind::f32) return bprop_typed<float>(pr, isa);
  return bprop_typed<std::int16_t>(pr, isa);
}

std::size_t fprop_workspace_bytes(const Geometry& g, std::size_t element_bytes) {
  const std::int64_t rows = g.C * g.taps();
  const std::int64_t per_block = block_positions(rows, g.N, g.out_positions(), element_bytes);
  return static_cast<std::size_t>(rows * (per_block * g.N + g.K)) * element_bytes;
}

std::size_t bprop_workspace_bytes(const Geometry& g, std::size_t element_bytes) {
  // The packed filter, then the largest class's own scratch (outputs as wide as the operands).
  const std::int64_t all_rows = g.K * g.taps() * g.upscale_phases();
  std::size_t largest = 0;
  for (std::int64_t ci = 0; ci < residue_classes(g); ++ci) {
    const ResidueClass rc = residue_class(g, ci);
    if (rc.positions() == 0) continue;
    const ClassScratch cs = class_scratch(g, static_cast<std::int64_t>(reaching_rows(g, rc).size()),
                                          rc.positions(), element_bytes);
    const std::int64_t elements = (cs.own_filter ? g.C * cs.k : 0) + cs.k * cs.per_block * g.N +
                                  (cs.staged ? g.C * cs.per_block * g.N : 0);
    largest = std::max(largest, static_cast<std::size_t>(elements) * element_bytes);
  }
  return static_cast<std::size_t>(g.C * all_rows) * element_bytes + largest;
}

namespace {

// The problem class of a CPU convolution: every layout runs alike (the lowering reads any
// strides), so the geometry and the element kinds decide the plan.
struct ConvCpuKey {
  ConvDirection direction;
  ElementKind x, y, out;
  Geometry g;
  GemmIsa cap;
  auto operator<=>(const ConvCpuKey&) const = default;
  std::string describe() const {
    return g.describe() + ", " + gemm::element_kind_name(x) + " with " +
           gemm::element_kind_name(y) + " into " + gemm::element_kind_name(out);
  }
};

ConvCpuPlan make_conv_cpu_plan(const ConvCpuKey& key) {
  ConvCpuPlan plan;
  plan.isa = backend::cpu::gemm_detail::choose_isa(key.cap, plan);
  plan.kernel_name = backend::cpu::gemm_detail::isa_kernel_name(plan.isa);
  const std::size_t element = key.x == ElementKind::f32 ? 4 : (key.x == ElementKind::u8 ? 1 : 2);
  plan.workspace_bytes =
      key.direction == ConvDirection::fprop   ? fprop_workspace_bytes(key.g, element)
      : key.direction == ConvDirection::bprop ? bprop_workspace_bytes(key.g, element)
                                              : update_workspace_bytes(key.g, element);
  plan.choices = key.direction == ConvDirection::update ? "direct accumulation" : "lowered blocks";
  return plan;
}

}  // namespace

const ConvCpuPlan& conv_cpu_plan(ConvDirection direction, const ConvProblem& p) {
  static backend::PlanCache<ConvCpuKey, ConvCpuPlan> caches[3] = {
      backend::PlanCache<ConvCpuKey, ConvCpuPlan>("conv fprop"),
      backend::PlanCache<ConvCpuKey, ConvCpuPlan>("conv bprop"),
      backend::PlanCache<ConvCpuKey, ConvCpuPlan>("conv update")};
  const ConvCpuKey key{direction,  p.x.kind, p.y.kind,
                       p.out.kind, p.g,      backend::cpu::gemm_detail::gemm_isa_cap()};
  return caches[static_cast<int>(direction)].get(key, [&] { return make_conv_cpu_plan(key); });
}

GemmStats run_conv_cpu(const ConvCpuPlan& plan, ConvDirection direction, const ConvProblem& p) {
  switch (direction) {
    case ConvDirection::fprop:
      return fprop_cpu(p, plan.isa);
    case ConvDirection::bprop:
      return bprop_cpu(p, plan.isa);
    case ConvDirection::update:
      break;
  }
  return update_cpu(p, plan.isa);
}

}  // namespace flexkit::conv
