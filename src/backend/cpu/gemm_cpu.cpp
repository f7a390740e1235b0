// The CPU GEMM driver: its plans (the kernel set chosen in gemm_cpu_plan.cpp, the cut into work
// units) and GotoBLAS-style blocking around the microkernels of backend/cpu/gemm/ (k blocks of
// kKc, row blocks of kMc, column strips of up to kNcMax), packing from any strides, and the
// portable epilogue. Work is split over threads by output strips only, so every output element
// sees the same k blocking, and therefore the same integer sum (exact anyway) and the same f32
// rounding chain, whatever the thread count.
#include "backend/cpu/gemm_cpu.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#include "backend/cpu/gemm/gemm_kernels.hpp"
#include "backend/cpu/gemm/gemm_pack.hpp"
#include "backend/cpu/thread_pool.hpp"
#include "core/text.hpp"

namespace flexkit::backend::cpu {

using namespace gemm_detail;

namespace {

using gemm::ElementKind;
using gemm::EpilogueMode;
using gemm::GemmProblem;

// k block: 128 pairs, the most an integer kernel call may sum in int32 (gemm_kernels.hpp), and a
// 32-column B micro-panel of it (32 KiB with two planes) fits the L1 cache.
constexpr std::int64_t kKc = 2 * kMaxIntPairs;
// Rows of A packed at once (a multiple of every kernel's MR: 4, 6, 12); the block stays in L2.
constexpr std::int64_t kMc = 144;
// Widest column strip one packed B block covers, and the narrowest the planner cuts for
// parallelism.
constexpr std::int64_t kNcMax = 512;
constexpr std::int64_t kMinNc = 128;
// With more than one k block, rows whose int64 / f32 partial sums are kept at once.
constexpr std::int64_t kMsMax = 4 * kMc;
// Below this many multiply-adds the threads cost more than they save.
constexpr double kSerialMacs = 1 << 18;
// Widest microkernel tile (NR) of any instruction set.
constexpr int kMaxTileCols = 64;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}
std::int64_t round_up(std::int64_t a, std::int64_t b) {
  return ceil_div(a, b) * b;
}

// A 64-byte aligned scratch buffer, taken from a small process-wide pool: fresh multi-megabyte
// allocations come from mmap and page-fault on first touch in every call, which costs as much
// as the arithmetic of a 256³ product.
class Scratch {
 public:
  explicit Scratch(std::size_t bytes) : bytes_(std::max<std::size_t>(bytes, 64)) {
    {
      std::lock_guard<std::mutex> lock(pool_mutex());
      auto& pool = pool_list();
      // The smallest pooled buffer that is large enough.
      auto best = pool.end();
      for (auto it = pool.begin(); it != pool.end(); ++it)
        if (it->second >= bytes_ && (best == pool.end() || it->second < best->second)) best = it;
      if (best != pool.end()) {
        data_ = best->first;
        bytes_ = best->second;
        pool.erase(best);
        return;
      }
    }
    data_ = ::operator new (bytes_, std::align_val_t{64});
  }
  ~Scratch() {
    std::lock_guard<std::mutex> lock(pool_mutex());
    auto& pool = pool_list();
    pool.emplace_back(data_, bytes_);
    // Keep a few per worker (three buffers each); drop the smallest beyond that.
    const std::size_t keep = 3 * static_cast<std::size_t>(worker_count()) + 3;
    if (pool.size() > keep) {
      auto smallest = std::min_element(pool.begin(), pool.end(), [](const auto& x, const auto& y) {
        return x.second < y.second;
      });
      ::operator delete (smallest->first, std::align_val_t{64});
      pool.erase(smallest);
    }
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  static std::mutex& pool_mutex() {
    static std::mutex m;
    return m;
  }
  static std::vector<std::pair<void*, std::size_t>>& pool_list() {
    static std::vector<std::pair<void*, std::size_t>> pool;
    return pool;
  }
  std::size_t bytes_;
  void* data_ = nullptr;
};

using Plan = GemmBlocking;

Plan make_blocking(const GemmProblem& p, int mr, int nr, std::int64_t workers) {
  Plan plan;
  plan.nc = std::min(kNcMax, round_up(p.n, nr));
  plan.n_strips = ceil_div(p.n, plan.nc);
  plan.m_parts = 1;
  // Two units per worker at least, handed out dynamically (for_units), so that a core slowed by
  // another process takes fewer; narrower strips first (each B block is still packed once),
  // then row parts of at least kMc rows.
  const std::int64_t want = workers > 1 ? 2 * workers : 1;
  if (p.batch * plan.n_strips < want) {
    const std::int64_t strips = ceil_div(want, p.batch);
    plan.nc = std::max<std::int64_t>(std::min<std::int64_t>(round_up(p.n, nr), kMinNc),
                                     round_up(ceil_div(p.n, strips), nr));
    plan.n_strips = ceil_div(p.n, plan.nc);
    if (p.batch * plan.n_strips < want)
      plan.m_parts =
          std::max<std::int64_t>(1, std::min(ceil_div(want, p.batch * plan.n_strips),
                                             ceil_div(p.m, std::max<std::int64_t>(mr, kMc / 2))));
  }
  return plan;
}

// The rows, columns and batch entry one work unit covers.
struct Unit {
  std::int64_t b, i0, i1, j0, j1;
};

Unit unit_at(const GemmProblem& p, const Plan& plan, std::int64_t u) {
  const std::int64_t per_batch = plan.units();
  Unit w;
  w.b = u / per_batch;
  const std::int64_t strip = (u % per_batch) / plan.m_parts, part = u % plan.m_parts;
  w.j0 = strip * plan.nc;
  w.j1 = std::min(p.n, w.j0 + plan.nc);
  w.i0 = p.m * part / plan.m_parts;
  w.i1 = p.m * (part + 1) / plan.m_parts;
  return w;
}

// ---- integer products ---------------------------------------------------------------------

// The commonest epilogue, flex16 store without an old value, per tile row: round_row(r, m)
// rounds row r into m and returns its statistics; a contiguous output row is written in place,
// a strided one is staged, then scattered.
template <typename RoundRow>
void store16_rows(const GemmProblem& p, std::int64_t b, std::int64_t i0, int mv, std::int64_t j0,
                  int nv, RoundRow round_row, portable::GemmStats& stats) {
  const gemm::OutputRef& c = p.c;
  std::int16_t staged[kMaxTileCols];
  for (int r = 0; r < mv; ++r) {
    std::int16_t* out = static_cast<std::int16_t*>(c.data) + b * c.batch_stride +
                        (i0 + r) * c.row_stride + j0 * c.col_stride;
    std::int16_t* m = c.col_stride == 1 ? out : staged;
    const RowStats row = round_row(r, m);
    if (c.col_stride != 1)
      for (int j = 0; j < nv; ++j) out[j * c.col_stride] = staged[j];
    // The same record gemm_stats_store builds element by element (max and count only).
    stats.max_abs_m = std::max(stats.max_abs_m, row.max_abs);
    stats.saturated += static_cast<std::uint64_t>(row.saturated);
  }
}

// That epilogue from exact int64 accumulators: the instruction set's straight-line round_row
// where the epilogue is integer-only, the portable rounding otherwise.
void finish_int_tile_store16(const GemmProblem& p, const std::int64_t* tile, std::int64_t ldc,
                             std::int64_t b, std::int64_t i0, int mv, std::int64_t j0, int nv,
                             RoundRowFn round_row, portable::GemmStats& stats) {
  const portable::GemmEpilogue& e = p.epilogue;
  const RoundRowFn round =
      e.integer_only && e.scale > 0 && e.scale < 63 ? round_row : &round_row_portable;
  store16_rows(
      p, b, i0, mv, j0, nv, [&](int r, std::int16_t* m) { return round(e, tile + r * ldc, nv, m); },
      stats);
}

// Finishes an mv × nv tile of exact accumulators through the portable epilogue.
void finish_int_tile(const GemmProblem& p, const std::int64_t* tile, std::int64_t ldc,
                     std::int64_t b, std::int64_t i0, int mv, std::int64_t j0, int nv,
                     RoundRowFn round_row, portable::GemmStats& stats) {
  const portable::GemmEpilogue& e = p.epilogue;
  const gemm::OutputRef& c = p.c;
  if (p.mode == EpilogueMode::sums) {
    for (int r = 0; r < mv; ++r) {
      std::int64_t* out = static_cast<std::int64_t*>(c.data) + b * c.batch_stride +
                          (i0 + r) * c.row_stride + j0 * c.col_stride;
      for (int j = 0; j < nv; ++j) out[j * c.col_stride] = tile[r * ldc + j];
    }
    return;
  }
  const bool store = p.mode == EpilogueMode::store;
  if (store && c.kind == ElementKind::flex16 && !e.reads_old) {
    finish_int_tile_store16(p, tile, ldc, b, i0, mv, j0, nv, round_row, stats);
    return;
  }
  for (int r = 0; r < mv; ++r) {
    const std::int64_t* acc = tile + r * ldc;
    const std::int64_t row = b * c.batch_stride + (i0 + r) * c.row_stride + j0 * c.col_stride;
    if (c.kind == ElementKind::flex16) {
      std::int16_t* out = static_cast<std::int16_t*>(c.data) + row;
      for (int j = 0; j < nv; ++j) {
        std::int16_t* o = out + j * c.col_stride;
        const std::int16_t old = e.reads_old ? *o : std::int16_t{0};
        if (store) {
          const portable::Flex16Code code = portable::gemm_flex16_result(e, acc[j], old);
          *o = code.m;
          portable::gemm_stats_store(stats, code);
        } else {
          portable::gemm_stats_measure(stats, e, acc[j], old);
        }
      }
    } else {
      float* out = static_cast<float*>(c.data) + row;
      for (int j = 0; j < nv; ++j) {
        float* o = out + j * c.col_stride;
        const float old = e.reads_old ? *o : 0.0f;
        if (store) {
          *o = portable::gemm_f32_result(e, acc[j], old);
        } else if (e.integer_only) {
          portable::gemm_stats_measure(stats, e, acc[j], 0);
        } else {
          // gemm_stats_measure takes a flex16 old value; an f32 output's old value is a float.
          const std::uint64_t key = portable::gemm_order_key(portable::gemm_value(e, acc[j], old));
          stats.value_max_key = std::max(stats.value_max_key, key);
          stats.value_min_key = std::min(stats.value_min_key, key);
        }
      }
    }
  }
}

// Scratch for one worker, sized for the largest unit.
struct IntScratch {
  Scratch a_pack, b_pack, partial;
  IntScratch(const IntKernel& kr, const Plan& plan, bool multi_k)
      : a_pack(sizeof(std::int16_t) * kMc * kKc),
        b_pack(sizeof(std::int16_t) * plan.nc * kKc * kr.planes),
        partial(multi_k ? sizeof(std::int64_t) * kMsMax * plan.nc : 0) {}
};

template <typename TB>
void run_int_unit(const GemmProblem& p, const IntKernel& kr, const KernelSet& kernels,
                  const Plan& plan, const Unit& w, IntScratch& s, portable::GemmStats& stats) {
  const auto* a_base = static_cast<const std::int16_t*>(p.a.data) + w.b * p.a.batch_stride;
  const auto* b_base = static_cast<const TB*>(p.b.data) + w.b * p.b.batch_stride;
  std::int16_t* a_pack = s.a_pack.as<std::int16_t>();
  std::int16_t* b_pack = s.b_pack.as<std::int16_t>();
  std::int64_t* partial = s.partial.as<std::int64_t>();
  const std::int64_t nk = ceil_div(p.k, kKc);
  const std::int64_t cols = w.j1 - w.j0;
  const std::int64_t ms = nk > 1 ? kMsMax : w.i1 - w.i0;
  const std::int64_t ld_partial = plan.nc;
  alignas(64) std::int64_t local[16 * 64];  // one tile (MR·NR ≤ 1024)
  // A product whose whole K is one kernel call, stored into flex16 without old values, rounds
  // straight from the call's int32 plane sums (RoundPlanesRowFn): no int64 tile.
  const portable::GemmEpilogue& e = p.epilogue;
  const bool from_planes = nk == 1 && kr.planes_fn != nullptr &&
                           kernels.round_planes_row != nullptr && p.mode == EpilogueMode::store &&
                           p.c.kind == ElementKind::flex16 && !e.reads_old &&
                           planes_round_fits(e, kr.planes);
  alignas(64) std::int32_t sums[2 * 16 * 64];
  for (std::int64_t s0 = w.i0; s0 < w.i1; s0 += ms) {
    const std::int64_t s1 = std::min(w.i1, s0 + ms);
    for (std::int64_t kb = 0; kb < nk; ++kb) {
      const std::int64_t k0 = kb * kKc, kv = std::min(kKc, p.k - k0), pairs = (kv + 1) / 2;
      const bool last = kb == nk - 1;
      const StridedBlock<TB> b_block{b_base + k0 * p.b.row_stride + w.j0 * p.b.col_stride,
                                     p.b.row_stride, p.b.col_stride};
      if constexpr (std::is_same_v<TB, std::int16_t>) {
        kr.pack_b(b_block, kv, cols, kr.nr, b_pack);
      } else {
        pack_b_int(b_block, kv, cols, kr.nr, b_pack);
      }
      const std::int64_t b_panel = pairs * kr.planes * kr.nr * 2;
      for (std::int64_t ic = s0; ic < s1; ic += kMc) {
        const std::int64_t rows = std::min(kMc, s1 - ic);
        kr.pack_a(StridedBlock<std::int16_t>{a_base + ic * p.a.row_stride + k0 * p.a.col_stride,
                                             p.a.row_stride, p.a.col_stride},
                  rows, kv, kr.mr, a_pack);
        const std::int64_t a_panel = pairs * kr.mr * 2;
        for (std::int64_t jj = 0; jj < cols; jj += kr.nr) {
          const int nv = static_cast<int>(std::min<std::int64_t>(kr.nr, cols - jj));
          const std::int16_t* bp = b_pack + (jj / kr.nr) * b_panel;
          for (std::int64_t ii = 0; ii < rows; ii += kr.mr) {
            const int mv = static_cast<int>(std::min<std::int64_t>(kr.mr, rows - ii));
            const std::int16_t* ap = a_pack + (ii / kr.mr) * a_panel;
            std::int64_t* tile = local;
            std::int64_t ldc = kr.nr;
            if (nk > 1) {
              tile = partial + (ic - s0 + ii) * ld_partial + jj;
              ldc = ld_partial;
            }
            if (from_planes) {
              kr.planes_fn(pairs, ap, bp, sums);
              const int nr = kr.nr, low = kr.planes == 2 ? kr.mr * nr : -1;
              store16_rows(
                  p, w.b, ic + ii, mv, w.j0 + jj, nv,
                  [&](int r, std::int16_t* m) {
                    const std::int32_t* h = sums + r * nr;
                    return kernels.round_planes_row(e, h, low < 0 ? nullptr : h + low, nv, m);
                  },
                  stats);
              continue;
            }
            kr.fn(pairs, ap, bp, tile, ldc, kb > 0);
            if (last)
              finish_int_tile(p, tile, ldc, w.b, ic + ii, mv, w.j0 + jj, nv, kernels.round_row,
                              stats);
          }
        }
      }
    }
  }
}

// ---- f32 products -------------------------------------------------------------------------

void finish_f32_tile(const GemmProblem& p, const float* tile, std::int64_t ldc, std::int64_t b,
                     std::int64_t i0, int mv, std::int64_t j0, int nv) {
  const gemm::OutputRef& c = p.c;
  const float alpha = p.alpha, beta = p.beta;
  for (int r = 0; r < mv; ++r) {
    const float* acc = tile + r * ldc;
    float* out = static_cast<float*>(c.data) + b * c.batch_stride + (i0 + r) * c.row_stride +
                 j0 * c.col_stride;
    if (beta == 0.0f) {
      for (int j = 0; j < nv; ++j) out[j * c.col_stride] = alpha * acc[j];
    } else {
      for (int j = 0; j < nv; ++j) {
        float* o = out + j * c.col_stride;
        *o = alpha * acc[j] + beta * *o;  // two roundings and a sum: -ffp-contract=off
      }
    }
  }
}

struct F32Scratch {
  Scratch a_pack, b_pack, partial;
  F32Scratch(const Plan& plan, bool multi_k)
      : a_pack(sizeof(float) * kMc * kKc),
        b_pack(sizeof(float) * plan.nc * kKc),
        partial(multi_k ? sizeof(float) * kMsMax * plan.nc : 0) {}
};

void run_f32_unit(const GemmProblem& p, const F32Kernel& kr, const Plan& plan, const Unit& w,
                  F32Scratch& s) {
  const auto* a_base = static_cast<const float*>(p.a.data) + w.b * p.a.batch_stride;
  const auto* b_base = static_cast<const float*>(p.b.data) + w.b * p.b.batch_stride;
  float* a_pack = s.a_pack.as<float>();
  float* b_pack = s.b_pack.as<float>();
  float* partial = s.partial.as<float>();
  const std::int64_t nk = ceil_div(p.k, kKc);
  const std::int64_t cols = w.j1 - w.j0;
  const std::int64_t ms = nk > 1 ? kMsMax : w.i1 - w.i0;
  const std::int64_t ld_partial = plan.nc;
  alignas(64) float local[16 * 64];
  for (std::int64_t s0 = w.i0; s0 < w.i1; s0 += ms) {
    const std::int64_t s1 = std::min(w.i1, s0 + ms);
    for (std::int64_t kb = 0; kb < nk; ++kb) {
      const std::int64_t k0 = kb * kKc, kv = std::min(kKc, p.k - k0);
      const bool last = kb == nk - 1;
      kr.pack_b(StridedBlock<float>{b_base + k0 * p.b.row_stride + w.j0 * p.b.col_stride,
                                    p.b.row_stride, p.b.col_stride},
                kv, cols, kr.nr, b_pack);
      for (std::int64_t ic = s0; ic < s1; ic += kMc) {
        const std::int64_t rows = std::min(kMc, s1 - ic);
        kr.pack_a(StridedBlock<float>{a_base + ic * p.a.row_stride + k0 * p.a.col_stride,
                                      p.a.row_stride, p.a.col_stride},
                  rows, kv, kr.mr, a_pack);
        for (std::int64_t jj = 0; jj < cols; jj += kr.nr) {
          const int nv = static_cast<int>(std::min<std::int64_t>(kr.nr, cols - jj));
          const float* bp = b_pack + (jj / kr.nr) * kv * kr.nr;
          for (std::int64_t ii = 0; ii < rows; ii += kr.mr) {
            const int mv = static_cast<int>(std::min<std::int64_t>(kr.mr, rows - ii));
            const float* ap = a_pack + (ii / kr.mr) * kv * kr.mr;
            float* tile = local;
            std::int64_t ldc = kr.nr;
            if (nk > 1) {
              tile = partial + (ic - s0 + ii) * ld_partial + jj;
              ldc = ld_partial;
            }
            kr.fn(kv, ap, bp, tile, ldc, kb > 0);
            if (last) finish_f32_tile(p, tile, ldc, w.b, ic + ii, mv, w.j0 + jj, nv);
          }
        }
      }
    }
  }
}

// Runs body(unit) for every unit: inline when the product is small, otherwise on the thread pool
// with units handed out from a shared counter. Which thread runs a unit never changes what the
// unit computes, so results do not depend on the schedule. `make_state` builds one worker's
// scratch.
template <typename State, typename MakeState, typename Body>
void for_units(const GemmProblem& p, std::int64_t units, MakeState make_state, Body body) {
  const double macs = static_cast<double>(p.batch) * static_cast<double>(p.m) *
                      static_cast<double>(p.n) * static_cast<double>(p.k);
  const std::int64_t workers = std::min<std::int64_t>(worker_count(), units);
  if (macs < kSerialMacs || workers <= 1) {
    State state = make_state();
    for (std::int64_t u = 0; u < units; ++u) body(state, u);
    return;
  }
  std::atomic<std::int64_t> next{0};
  parallel_for(workers, 1, [&](std::int64_t, std::int64_t) {
    State state = make_state();
    for (std::int64_t u = next++; u < units; u = next++) body(state, u);
  });
}

// The scratch bytes one run takes: one worker's packing buffers (and partial sums with more
// than one k block) for each worker for_units starts.
std::size_t scratch_bytes(const GemmProblem& p, const KernelSet& kernels, const Plan& plan) {
  const bool multi_k = p.k > kKc;
  const bool f32 = p.a.kind == ElementKind::f32;
  const std::int64_t element = f32 ? 4 : 2;
  const std::int64_t planes =
      f32 ? 1 : (p.b.kind == ElementKind::u8 ? kernels.u8.planes : kernels.flex16.planes);
  const std::int64_t partial = multi_k ? (f32 ? 4 : 8) * kMsMax * plan.nc : 0;
  const std::int64_t per_worker = element * kMc * kKc + element * plan.nc * kKc * planes + partial;
  const double macs = static_cast<double>(p.batch) * static_cast<double>(p.m) *
                      static_cast<double>(p.n) * static_cast<double>(p.k);
  const std::int64_t units = p.batch * plan.units();
  const std::int64_t workers =
      macs < kSerialMacs ? 1
                         : std::max<std::int64_t>(1, std::min<std::int64_t>(worker_count(), units));
  return static_cast<std::size_t>(per_worker * workers);
}

}  // namespace

GemmCpuPlan make_gemm_cpu_plan(const GemmProblem& p, GemmIsa cap) {
  GemmCpuPlan plan;
  plan.isa = choose_isa(cap, plan);
  plan.kernel_name = isa_kernel_name(plan.isa);
  const KernelSet kernels = kernels_for(plan.isa);
  int mr = kernels.f32.mr, nr = kernels.f32.nr;
  if (p.a.kind != ElementKind::f32) {
    const IntKernel& kr = p.b.kind == ElementKind::u8 ? kernels.u8 : kernels.flex16;
    mr = kr.mr;
    nr = kr.nr;
  }
  if (p.batch <= 0 || p.m <= 0 || p.n <= 0 || p.k <= 0) return plan;
  plan.blocking = make_blocking(p, mr, nr, worker_count());
  plan.workspace_bytes = scratch_bytes(p, kernels, plan.blocking);
  plan.choices = detail::cat("tile ", mr, "x", nr, " strips ", plan.blocking.n_strips, "x",
                             plan.blocking.nc, " row parts ", plan.blocking.m_parts);
  return plan;
}

portable::GemmStats run_gemm_cpu(const GemmCpuPlan& cpu_plan, const GemmProblem& p) {
  portable::GemmStats total = portable::gemm_stats_identity();
  if (p.batch <= 0 || p.m <= 0 || p.n <= 0 || p.k <= 0) return total;
  const KernelSet kernels = kernels_for(cpu_plan.isa);
  const bool multi_k = p.k > kKc;
  const Plan& plan = cpu_plan.blocking;

  if (p.a.kind == ElementKind::f32) {
    const F32Kernel& kr = kernels.f32;
    for_units<F32Scratch>(
        p, p.batch * plan.units(), [&] { return F32Scratch(plan, multi_k); },
        [&](F32Scratch& scratch, std::int64_t u) {
          run_f32_unit(p, kr, plan, unit_at(p, plan, u), scratch);
        });
    return total;
  }

  const bool b_u8 = p.b.kind == ElementKind::u8;
  const IntKernel& kr = b_u8 ? kernels.u8 : kernels.flex16;
  const std::int64_t units = p.batch * plan.units();
  std::vector<portable::GemmStats> unit_stats(units, portable::gemm_stats_identity());
  for_units<IntScratch>(
      p, units, [&] { return IntScratch(kr, plan, multi_k); },
      [&](IntScratch& scratch, std::int64_t u) {
        const Unit w = unit_at(p, plan, u);
        if (b_u8) {
          run_int_unit<std::uint8_t>(p, kr, kernels, plan, w, scratch, unit_stats[u]);
        } else {
          run_int_unit<std::int16_t>(p, kr, kernels, plan, w, scratch, unit_stats[u]);
        }
      });
  for (const auto& s : unit_stats) portable::gemm_stats_merge(total, s);
  return total;
}

namespace gemm_detail {

portable::GemmStats gemm_cpu_with_isa(const GemmProblem& p, GemmIsa isa) {
  return run_gemm_cpu(make_gemm_cpu_plan(p, isa), p);
}

}  // namespace gemm_detail
}  // namespace flexkit::backend::cpu

namespace flexkit::gemm {

portable::GemmStats gemm_cpu(const GemmProblem& problem) {
  using namespace flexkit::backend::cpu;
  return run_gemm_cpu(make_gemm_cpu_plan(problem, gemm_detail::gemm_isa_cap()), problem);
}

}  // namespace flexkit::gemm
