// The choice of a GEMM plan (gemm_plan.hpp): each candidate's can_implement and plan (kernel,
// tiles, K split), the first that applies per shape class, and the plan cache and its counters.
#include "backend/cuda/gemm/gemm_plan.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

#include "backend/cuda/gemm/gemm_planar.hpp"
#include "backend/cuda/launch_support.hpp"
#include "core/environment.hpp"
#include "core/text.hpp"
#include "flexkit/cuda.hpp"
#include "flexkit/error.hpp"

namespace flexkit::backend::cuda::gemm_kernels {

struct GemmPlanCounts {
  std::uint64_t made, hits;
};

const GemmSettings& gemm_settings() {
  static const GemmSettings settings{detail::env_choice("FLEXKIT_GEMM_KERNEL",
                                                        KernelChoice::automatic,
                                                        {{"simple", KernelChoice::simple},
                                                         {"planar", KernelChoice::planar},
                                                         {"ss", KernelChoice::ss},
                                                         {"wgmma", KernelChoice::automatic},
                                                         {"auto", KernelChoice::automatic}})};
  return settings;
}

OperandLayout classify(const OperandView& v, int64_t rows, int64_t k, int64_t batch,
                       int64_t element_bytes) {
  const int64_t align = 16 / element_bytes;
  const int64_t row_stride = rows == 1 ? 0 : v.row_stride;
  const int64_t k_stride = k == 1 ? 0 : v.k_stride;
  const int64_t batch_stride = batch == 1 ? 0 : v.batch_stride;
  if (reinterpret_cast<std::uintptr_t>(v.data) % 16 != 0 || batch_stride % align != 0) return {};
  if ((k_stride == 1 || k == 1) && row_stride % align == 0) return {true, true};
  if ((row_stride == 1 || rows == 1) && k_stride % align == 0) return {true, false};
  return {};
}

// Strides along axes of extent 1 set to 0, the unit stride of such an axis to 1: the addresses the
// kernels form are unchanged, and the wgmma kernel's stage step along K stays meaningful.
OperandView normalised(OperandView v, int64_t rows, int64_t k, int64_t batch) {
  if (rows == 1) v.row_stride = 0;
  if (k == 1) v.k_stride = 1;
  if (batch == 1) v.batch_stride = 0;
  return v;
}

std::string PlanKey::describe() const {
  return detail::cat("device ", device, " batch ", batch, " m ", m, " n ", n, " k ", k, ", B ",
                     b_is_u8 ? "u8" : "flex16", " out ", out_is_f32 ? "f32" : "flex16", ", ",
                     measure ? "measure" : "store", ", layout ",
                     !layout_fast ? "strided or unaligned"
                                  : detail::cat("A ", a_k_contig ? "k" : "m", "-contiguous B ",
                                                b_k_contig ? "k" : "n", "-contiguous"));
}

PlanKey plan_key(const gemm::GemmProblem& problem, int device) {
  const bool b_is_u8 = problem.b.kind == gemm::ElementKind::u8;
  // B is seen transposed (n × k) so that both operands are "rows × k" to the kernels.
  const OperandView a{problem.a.data, problem.a.row_stride, problem.a.col_stride,
                      problem.a.batch_stride};
  const OperandView b{problem.b.data, problem.b.col_stride, problem.b.row_stride,
                      problem.b.batch_stride};
  const OperandLayout a_layout = classify(a, problem.m, problem.k, problem.batch, 2);
  const OperandLayout b_layout = classify(b, problem.n, problem.k, problem.batch, b_is_u8 ? 1 : 2);
  PlanKey key{};
  key.device = device;
  key.b_is_u8 = b_is_u8;
  key.out_is_f32 = problem.epilogue.out_kind == portable::GemmOutKind::f32;
  key.measure = problem.mode == gemm::EpilogueMode::measure;
  key.forced = gemm_settings().forced;
  key.layout_fast = a_layout.fast && b_layout.fast;
  key.a_k_contig = key.layout_fast && a_layout.k_contig;
  key.b_k_contig = key.layout_fast && b_layout.k_contig;
  key.batch = problem.batch;
  key.m = problem.m;
  key.n = problem.n;
  key.k = problem.k;
  return key;
}

namespace {

constexpr const char* kPlanar = "cuda.planar";
constexpr const char* kSs = "cuda.ss";
constexpr const char* kSimple = "cuda.simple";

bool in_int32_range(const PlanKey& key) {
  return key.m <= INT32_MAX && key.n <= INT32_MAX && key.k <= INT32_MAX && key.batch <= INT32_MAX;
}

// The wgmma kernels' tiles and K split for a tile width; the split-K workspace and finishing pass
// where K is split.
Plan wgmma_plan(const PlanKey& key, int tile_n, int sms) {
  Plan plan;
  plan.tiles_m = ceil_div(key.m, kWgmmaTileM);
  plan.tiles_n = ceil_div(key.n, tile_n);
  const WgmmaKSplit split = wgmma_k_split(key.k, plan.tiles_m * plan.tiles_n * key.batch, sms);
  plan.splits = static_cast<int32_t>(split.splits);  // wgmma_grid_fits bounds it
  plan.k_chunk = split.k_chunk;
  if (split.splits > 1) {
    const int64_t outputs = key.batch * key.m * key.n;
    plan.workspace_bytes = static_cast<std::size_t>(outputs) * sizeof(int64_t);
    plan.finish_blocks = static_cast<unsigned>(
        std::min<int64_t>(ceil_div(outputs, kFinishThreads), int64_t(sms) * 8));
  }
  return plan;
}

// The wgmma grid: tiles · splits · batch entries as (x, y, z), the tiles in 32 bits.
CanImplement wgmma_grid_fits(const PlanKey& key, int tile_n, int sms) {
  const int64_t tiles = ceil_div(key.m, kWgmmaTileM) * ceil_div(key.n, tile_n);
  if (tiles > INT32_MAX) return cannot("more than 2^31 tiles");
  if (wgmma_k_split(key.k, tiles * key.batch, sms).splits > 65535)
    return cannot("more than 65535 K splits");
  return kCanImplement;
}

// The tile width of a u8 B: the wide tile (128 × 192) only for outputs of at least 4096 × 4096.
// Measured on an H100 (bench_gemm, ms, square → wide): 2048 × 512 × 6272 0.071 → 0.095,
// 2048 × 6272 × 512 0.084 → 0.101, 10 × 512 × 2048 0.031 → 0.038, 10 × 2048 × 512 0.022 → 0.028,
// 2048³ 0.063 → 0.087, 256 × 4096 × 4096 0.058 → 0.063, 4096 × 256 × 4096 0.059 → 0.073, but
// 4096³ 0.321 → 0.310: fewer, wider tiles pay only where the square ones already make many
// full waves; elsewhere they leave multiprocessors idle or the last wave part-empty.
int u8_tile_n(const PlanKey& key) {
  return key.m >= 4096 && key.n >= 4096 ? kWgmmaWideTileN : kWgmmaTileN;
}

// The planar kernel: any layout; its TMA coordinates are 32-bit. Splitting moves about
// 4·(m + n)·k bytes and saves time on 2·m·n·k products (≈ 280 → 360 TOP/s measured for flex16):
// it pays once m·n / (m + n) ≳ 1000, which measured as the break-even (2048³ equal, 1024³ and
// 256 × 4096 × 4096 slower, 4096³ and up faster). Operands without a unit stride have no other
// tensor-core kernel and always go planar.
int planar_tile_n(const PlanKey& key) {
  return key.b_is_u8 ? u8_tile_n(key) : kWgmmaTileN;
}

CanImplement can_implement_planar(const PlanKey& key, int sms) {
  if (key.forced == KernelChoice::simple || key.forced == KernelChoice::ss)
    return cannot("another kernel forced by FLEXKIT_GEMM_KERNEL");
  if (!in_int32_range(key)) return cannot("an extent past 2^31");
  if (key.forced == KernelChoice::automatic && key.layout_fast &&
      key.m * key.n < 1024 * (key.m + key.n))
    return cannot("does not pay below m·n = 1024·(m + n)");
  if (!device_is_sm90(key.device)) return cannot("device is not sm_90");
  if (const CanImplement grid = wgmma_grid_fits(key, planar_tile_n(key), sms); !grid.ok())
    return grid;
  if (!prepare_planar(key.b_is_u8, planar_tile_n(key))) return cannot("no sm_90a image");
  return kCanImplement;
}

Plan plan_planar(const PlanKey& key, int sms) {
  const int tile_n = planar_tile_n(key);
  Plan plan = wgmma_plan(key, tile_n, sms);
  plan.kind = KernelKind::planar;
  plan.variant = WgmmaVariant{key.b_is_u8, true, true, tile_n};
  plan.raw_stages = planar_ring_stages(key.b_is_u8, tile_n);
  plan.choices = detail::cat("tile 128x", tile_n, " splits ", plan.splits, " k_chunk ",
                             plan.k_chunk, " ring ", plan.raw_stages);
  return plan;
}

// The shared-memory kernel's variant: a u8 B's tile by u8_tile_n (the square one where a forced
// planar kernel falls back to it).
WgmmaVariant ss_variant(const PlanKey& key) {
  const bool own_choice = key.forced == KernelChoice::automatic || key.forced == KernelChoice::ss;
  return WgmmaVariant{key.b_is_u8, key.a_k_contig, key.b_k_contig,
                      key.b_is_u8 && own_choice ? u8_tile_n(key) : kWgmmaTileN};
}

CanImplement can_implement_ss(const PlanKey& key, int sms) {
  if (key.forced == KernelChoice::simple)
    return cannot("another kernel forced by FLEXKIT_GEMM_KERNEL");
  if (!key.layout_fast) return cannot("an operand without a unit stride or 16-byte rows");
  if (!device_is_sm90(key.device)) return cannot("device is not sm_90");
  const WgmmaVariant variant = ss_variant(key);
  if (const CanImplement grid = wgmma_grid_fits(key, variant.tile_n, sms); !grid.ok()) return grid;
  if (!prepare_wgmma(variant)) return cannot("no sm_90a image");
  return kCanImplement;
}

Plan plan_ss(const PlanKey& key, int sms) {
  const WgmmaVariant variant = ss_variant(key);
  Plan plan = wgmma_plan(key, variant.tile_n, sms);
  plan.kind = KernelKind::ss;
  plan.variant = variant;
  plan.raw_stages = wgmma_max_raw_stages(key.b_is_u8, variant.tile_n);
  plan.choices =
      detail::cat("tile 128x", variant.tile_n, " A ", variant.a_k_contig ? "k" : "m",
                  "-contiguous B ", variant.b_k_contig ? "k" : "n", "-contiguous", " splits ",
                  plan.splits, " k_chunk ", plan.k_chunk, " raw stages ", plan.raw_stages);
  return plan;
}

CanImplement can_implement_simple(const PlanKey& key) {
  if (ceil_div(key.m, kSimpleTile) * ceil_div(key.n, kSimpleTile) > INT32_MAX)
    return cannot("more than 2^31 tiles");
  return kCanImplement;
}

Plan plan_simple(const PlanKey& key) {
  Plan plan;
  plan.kind = KernelKind::simple;
  plan.tiles_m = ceil_div(key.m, kSimpleTile);
  plan.tiles_n = ceil_div(key.n, kSimpleTile);
  plan.splits = 1;
  plan.k_chunk = key.k;
  plan.choices = "tile 64x64";
  return plan;
}

// The first candidate that applies, with the reasons the ones before it did not.
Plan make_plan(const PlanKey& key) {
  const int sms = multiprocessors(key.device);
  HeavyOpPlan passed;
  Plan plan;
  const CanImplement planar = can_implement_planar(key, sms);
  if (planar.ok()) {
    plan = plan_planar(key, sms);
  } else {
    passed.pass_over(kPlanar, planar);
    const CanImplement ss = can_implement_ss(key, sms);
    if (ss.ok()) {
      plan = plan_ss(key, sms);
    } else {
      passed.pass_over(kSs, ss);
      if (!can_implement_simple(key).ok())
        throw ValueError("gemm_integer_cuda: output of " + std::to_string(key.m) + " x " +
                         std::to_string(key.n) + " needs more than 2^31 tiles");
      plan = plan_simple(key);
    }
  }
  plan.kernel_name = plan.kind == KernelKind::planar ? kPlanar
                     : plan.kind == KernelKind::ss   ? kSs
                                                     : kSimple;
  plan.passed_over = passed.passed_over;
  return plan;
}

PlanCache<PlanKey, Plan>& plan_cache() {
  static PlanCache<PlanKey, Plan> cache("dot");
  return cache;
}

}  // namespace

const Plan& plan_for(const PlanKey& key) {
  return plan_cache().get(key, [&] { return make_plan(key); });
}

GemmPlanCounts plan_counts() {
  const PlanCounts counts = plan_cache().counts();
  return {counts.made, counts.hits};
}

}  // namespace flexkit::backend::cuda::gemm_kernels

namespace flexkit::cuda {

GemmPlanStats gemm_plan_stats() {
  auto counts = backend::cuda::gemm_kernels::plan_counts();
  return {counts.made, counts.hits};
}

}  // namespace flexkit::cuda
