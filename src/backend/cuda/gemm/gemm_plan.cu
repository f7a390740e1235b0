// The choice of a GEMM plan (gemm_plan.hpp): the kernel, tiles and K split of each shape class,
// the plan cache and its counters, and the FLEXKIT_GEMM_LOG line of each new plan.
#include "backend/cuda/gemm/gemm_plan.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>

#include "backend/cuda/gemm/gemm_planar.hpp"
#include "backend/cuda/launch_support.hpp"
#include "core/environment.hpp"
#include "flexkit/cuda.hpp"
#include "flexkit/error.hpp"

namespace flexkit::backend::cuda::gemm_kernels {

struct GemmPlanCounts {
  std::uint64_t made, hits;
};

const GemmSettings& gemm_settings() {
  static const GemmSettings settings{
      detail::env_choice("FLEXKIT_GEMM_KERNEL", KernelChoice::automatic,
                         {{"simple", KernelChoice::simple},
                          {"planar", KernelChoice::planar},
                          {"ss", KernelChoice::ss},
                          {"wgmma", KernelChoice::automatic},
                          {"auto", KernelChoice::automatic}}),
      detail::env_flag("FLEXKIT_GEMM_LOG")};
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

namespace {

Plan make_plan(const PlanKey& key) {
  Plan plan;
  const int sms = multiprocessors(key.device);
  // The planar kernel: any layout; its TMA coordinates are 32-bit. Splitting moves about
  // 4·(m + n)·k bytes and saves time on 2·m·n·k products (≈ 280 → 360 TOP/s measured for
  // flex16): it pays once m·n / (m + n) ≳ 1000, which measured as the break-even (2048³ equal,
  // 1024³ and 256 × 4096 × 4096 slower, 4096³ and up faster). Operands without a unit stride
  // have no other tensor-core kernel and always go planar.
  const bool in_range =
      key.m <= INT32_MAX && key.n <= INT32_MAX && key.k <= INT32_MAX && key.batch <= INT32_MAX;
  const bool planar_pays =
      in_range && (!key.layout_fast || key.m * key.n >= 1024 * (key.m + key.n));
  const bool planar_wanted =
      key.forced == KernelChoice::planar || (key.forced == KernelChoice::automatic && planar_pays);
  if (planar_wanted && in_range && device_is_sm90(key.device)) {
    const int tile_n = key.b_is_u8 ? kWgmmaWideTileN : kWgmmaTileN;
    const int64_t tiles_m = ceil_div(key.m, kWgmmaTileM);
    const int64_t tiles_n = ceil_div(key.n, tile_n);
    const WgmmaKSplit split = wgmma_k_split(key.k, tiles_m * tiles_n * key.batch, sms);
    if (tiles_m * tiles_n <= INT32_MAX && split.splits <= 65535 &&
        prepare_planar(key.b_is_u8, tile_n)) {
      plan.kind = KernelKind::planar;
      plan.variant = WgmmaVariant{key.b_is_u8, true, true, tile_n};
      plan.tiles_m = tiles_m;
      plan.tiles_n = tiles_n;
      plan.splits = static_cast<int32_t>(split.splits);
      plan.k_chunk = split.k_chunk;
      plan.raw_stages = planar_ring_stages(key.b_is_u8, tile_n);
      if (split.splits > 1) {
        const int64_t outputs = key.batch * key.m * key.n;
        plan.workspace_bytes = static_cast<std::size_t>(outputs) * sizeof(int64_t);
        plan.finish_blocks = static_cast<unsigned>(
            std::min<int64_t>(ceil_div(outputs, kFinishThreads), int64_t(sms) * 8));
      }
      return plan;
    }
  }
  if (key.forced != KernelChoice::simple && key.layout_fast && device_is_sm90(key.device)) {
    // The wide tile: a u8 B in the shared-memory kernel (the square one where a forced planar
    // kernel falls back to it).
    const bool wide =
        key.b_is_u8 && (key.forced == KernelChoice::automatic || key.forced == KernelChoice::ss);
    const WgmmaVariant variant{key.b_is_u8, key.a_k_contig, key.b_k_contig,
                               wide ? kWgmmaWideTileN : kWgmmaTileN};
    const int64_t tiles_m = ceil_div(key.m, kWgmmaTileM);
    const int64_t tiles_n = ceil_div(key.n, variant.tile_n);
    const WgmmaKSplit split = wgmma_k_split(key.k, tiles_m * tiles_n * key.batch, sms);
    const int64_t splits = split.splits, k_chunk = split.k_chunk;
    if (tiles_m * tiles_n <= INT32_MAX && splits <= 65535 && prepare_wgmma(variant)) {
      plan.kind = KernelKind::ss;
      plan.variant = variant;
      plan.tiles_m = tiles_m;
      plan.tiles_n = tiles_n;
      plan.splits = static_cast<int32_t>(splits);
      plan.k_chunk = k_chunk;
      plan.raw_stages = wgmma_max_raw_stages(key.b_is_u8, variant.tile_n);
      if (splits > 1) {
        const int64_t outputs = key.batch * key.m * key.n;
        plan.workspace_bytes = static_cast<std::size_t>(outputs) * sizeof(int64_t);
        plan.finish_blocks = static_cast<unsigned>(
            std::min<int64_t>(ceil_div(outputs, kFinishThreads), int64_t(sms) * 8));
      }
      return plan;
    }
  }
  plan.kind = KernelKind::simple;
  plan.tiles_m = ceil_div(key.m, kSimpleTile);
  plan.tiles_n = ceil_div(key.n, kSimpleTile);
  if (plan.tiles_m * plan.tiles_n > INT32_MAX)
    throw ValueError("gemm_integer_cuda: output of " + std::to_string(key.m) + " x " +
                     std::to_string(key.n) + " needs more than 2^31 tiles");
  plan.splits = 1;
  plan.k_chunk = key.k;
  return plan;
}

// FLEXKIT_GEMM_LOG=1 prints every new plan to stderr (once per shape class): which kernel, the
// layout variant, the K split.
void log_plan(const PlanKey& key, const Plan& plan) {
  if (!gemm_settings().log) return;
  std::fprintf(
      stderr, "flexkit gemm plan: device %d batch %lld m %lld n %lld k %lld B %s out %s %s -> %s",
      key.device, static_cast<long long>(key.batch), static_cast<long long>(key.m),
      static_cast<long long>(key.n), static_cast<long long>(key.k), key.b_is_u8 ? "u8" : "flex16",
      key.out_is_f32 ? "f32" : "flex16", key.measure ? "measure" : "store",
      plan.kind == KernelKind::ss       ? "wgmma-ss (lean deep raw ring, pipelined)"
      : plan.kind == KernelKind::planar ? "wgmma-planar (byte planes, TMA ring)"
                                        : "simple");
  if (plan.kind == KernelKind::planar)
    std::fprintf(stderr, " (splits %d, k_chunk %lld, workspace %zu B, ring %d, tile 128x%d)",
                 plan.splits, static_cast<long long>(plan.k_chunk), plan.workspace_bytes,
                 plan.raw_stages, plan.variant.tile_n);
  if (plan.kind == KernelKind::ss)
    std::fprintf(stderr,
                 " (A %s, B %s, splits %d, k_chunk %lld, workspace %zu B, raw stages %d, tile "
                 "128x%d)",
                 plan.variant.a_k_contig ? "k-contiguous" : "m-contiguous",
                 plan.variant.b_k_contig ? "k-contiguous" : "n-contiguous", plan.splits,
                 static_cast<long long>(plan.k_chunk), plan.workspace_bytes, plan.raw_stages,
                 plan.variant.tile_n);
  // Why the simple kernel ran; the wgmma kernels need no excuse.
  if (plan.kind == KernelKind::simple)
    std::fprintf(stderr, " (%s)",
                 key.forced == KernelChoice::simple ? "forced by FLEXKIT_GEMM_KERNEL"
                 : !key.layout_fast ? "operand layout: no unit stride or unaligned rows"
                                    : "device is not sm_90, has no sm_90a image, or the grid is "
                                      "too large");
  std::fprintf(stderr, "\n");
}

// Counted under the plan mutex; read by flexkit::cuda::gemm_plan_stats().
std::mutex g_plan_mutex;
std::uint64_t g_plans_made = 0;
std::uint64_t g_plan_hits = 0;

}  // namespace

const Plan& plan_for(const PlanKey& key) {
  static std::map<PlanKey, Plan> plans;
  std::lock_guard<std::mutex> lock(g_plan_mutex);
  if (auto it = plans.find(key); it != plans.end()) {
    ++g_plan_hits;
    return it->second;
  }
  const Plan& plan = plans.emplace(key, make_plan(key)).first->second;  // map nodes never move
  ++g_plans_made;
  log_plan(key, plan);
  return plan;
}

GemmPlanCounts plan_counts() {
  std::lock_guard<std::mutex> lock(g_plan_mutex);
  return {g_plans_made, g_plan_hits};
}

}  // namespace flexkit::backend::cuda::gemm_kernels

namespace flexkit::cuda {

GemmPlanStats gemm_plan_stats() {
  auto counts = backend::cuda::gemm_kernels::plan_counts();
  return {counts.made, counts.hits};
}

}  // namespace flexkit::cuda
