// The CUDA convolution's plans (conv_implicit_gemm.hpp): the problem class, each candidate
// kernel's can_implement in the order they are tried, the plan of the first that applies, and
// the cache. The order and the conditions are the measured choice of the kernels:
//
//   f32 operands, FLEXKIT_CONV_KERNEL=direct, or a layout the gather cannot take → direct;
//   fprop / bprop within the shallow kernels' reach → transposed (≤ 64 rows, or ≤ 256 over one
//     stage, of plain activations), else warp-specialised (flex16), else one-role (u8, lockstep);
//   a 1×1 update over a plain input with a small side → deep-K;
//   an update whose tiles leave a partly empty last round → stream-K;
//   otherwise the lean kernel with K split as the GEMM splits it (unless that needs more than
//   65535 splits: direct).
#include <algorithm>
#include <cstdint>
#include <string>

#include "backend/cuda/check.hpp"
#include "backend/cuda/conv/conv_implicit_gemm.hpp"
#include "backend/cuda/conv/conv_implicit_gemm_kernels.hpp"
#include "backend/cuda/conv/conv_implicit_gemm_setup.hpp"
#include "backend/cuda/gemm/gemm_deep_k.hpp"
#include "backend/cuda/gemm/gemm_stream_k.hpp"
#include "backend/cuda/gemm/gemm_wgmma.hpp"
#include "backend/cuda/launch_support.hpp"
#include "core/text.hpp"

namespace flexkit::conv {
namespace {

using namespace implicit;
using backend::cannot;
using backend::kCanImplement;
using gemm::ElementKind;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

const char* kernel_name(ConvCudaKernel kernel) {
  switch (kernel) {
    case ConvCudaKernel::shallow_transposed:
      return "cuda.implicit_gemm.shallow_transposed";
    case ConvCudaKernel::shallow_specialized:
      return "cuda.implicit_gemm.shallow_specialized";
    case ConvCudaKernel::shallow:
      return "cuda.implicit_gemm.shallow";
    case ConvCudaKernel::deep_k:
      return "cuda.deep_k";
    case ConvCudaKernel::stream_k:
      return "cuda.implicit_gemm.stream_k";
    case ConvCudaKernel::lean:
      return "cuda.implicit_gemm.lean";
    case ConvCudaKernel::direct:
      break;
  }
  return "cuda.direct";
}

bool aligned(const void* p, std::uintptr_t bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

// Everything the choice reads of a problem: the geometry, the strides, the pointers' alignment
// (16 bytes for the copies and tensor maps, 4 for the shallow kernels' word stores), the epilogue
// up to where its shift falls against the shallow kernels' ranges, and the settings.
struct ConvCudaKey {
  int device;
  gemm::EpilogueMode mode;
  ElementKind x, y, out;
  bool integer_only, reads_old;
  int scale_class;  // the shift against the shallow kernels' ranges: < 1, 1 … 9, 10 … 31, > 31
  Geometry g;
  std::int64_t x_stride[5], y_stride[5];
  std::int64_t out_row_stride, out_col_stride;
  bool x_aligned, y_aligned, out_aligned, out_word_aligned;
  KernelChoice kernel;
  std::int64_t stream_k_ctas;  // −1: one per multiprocessor
  auto operator<=>(const ConvCudaKey&) const = default;

  std::string describe() const {
    return detail::cat(g.describe(), ", ", gemm::element_kind_name(x), " with ",
                       gemm::element_kind_name(y), " into ", gemm::element_kind_name(out), ", ",
                       mode == gemm::EpilogueMode::measure ? "measure" : "store", ", device ",
                       device);
  }
};

ConvCudaKey key_of(const ConvProblem& p, int device) {
  const ConvSettings& settings = conv_settings();  // throws for an unknown value first
  ConvCudaKey key{};
  key.device = device;
  key.mode = p.mode;
  key.x = p.x.kind;
  key.y = p.y.kind;
  key.out = p.out.kind;
  if (p.x.kind != ElementKind::f32) {
    key.integer_only = p.epilogue.integer_only;
    key.reads_old = p.epilogue.reads_old;
    const int s = p.epilogue.scale;
    key.scale_class = s < 1 ? 0 : s < portable::kByteProductRoundingMinShift ? 1 : s <= 31 ? 2 : 3;
  }
  key.g = p.g;
  std::copy(p.x.stride, p.x.stride + 5, key.x_stride);
  std::copy(p.y.stride, p.y.stride + 5, key.y_stride);
  key.out_row_stride = p.out.row_stride;
  key.out_col_stride = p.out.col_stride;
  key.x_aligned = aligned(p.x.data, 16);
  key.y_aligned = aligned(p.y.data, 16);
  key.out_aligned = aligned(p.out.data, 16);
  key.out_word_aligned = aligned(p.out.data, 4);
  key.kernel = settings.kernel;
  key.stream_k_ctas = settings.stream_k_ctas ? *settings.stream_k_ctas : -1;
  return key;
}

// ---- the candidates ---------------------------------------------------------------------------

// What every tensor-core kernel needs: integer operands, the path not switched off, a layout the
// gather takes (described into `setup`), the lean kernels' sm_90a image, 32-bit tile counts.
CanImplement tensor_cores_fit(ImplicitDirection direction, const ConvProblem& p, int device,
                              Setup& setup) {
  if (p.x.kind == ElementKind::f32) return cannot("f32 operands");
  if (conv_settings().kernel == KernelChoice::direct) return cannot("FLEXKIT_CONV_KERNEL=direct");
  if (const CanImplement layout = describe(direction, p, setup); !layout.ok()) return layout;
  if (!prepared(device, setup.args.b_is_u8 != 0, setup.kernel))
    return cannot("device is not sm_90 or has no sm_90a image");
  if (ceil_div(setup.args.m, gk::kWgmmaTileM) * ceil_div(setup.args.n, gk::kWgmmaTileN) > INT32_MAX)
    return cannot("more than 2^31 tiles");
  return kCanImplement;
}

// The three shallow forms share their conditions (FLEXKIT_CONV_KERNEL=lean keeps the
// one-tile-per-CTA kernel instead).
CanImplement shallow_forms_fit(const Setup& setup, int device) {
  if (conv_settings().kernel == KernelChoice::lean) return cannot("FLEXKIT_CONV_KERNEL=lean");
  if (const CanImplement fit = shallow_fits(setup); !fit.ok()) return fit;
  if (!prepared(device, setup.args.b_is_u8 != 0, setup.kernel, true))
    return cannot("no sm_90a image of the shallow kernels");
  return kCanImplement;
}

// flex16 activations take the warp-specialised forms (FLEXKIT_CONV_KERNEL=lockstep: the one-role
// kernel, for comparisons); of these, the transposed one where it applies
// (FLEXKIT_CONV_KERNEL=specialized keeps the warp-specialised one).
CanImplement can_implement_shallow_specialized(const Setup& setup) {
  if (setup.args.b_is_u8) return cannot("u8 activations");
  if (conv_settings().kernel == KernelChoice::lockstep)
    return cannot("FLEXKIT_CONV_KERNEL=lockstep");
  return kCanImplement;
}

CanImplement can_implement_shallow_transposed(const Setup& setup) {
  if (const CanImplement specialized = can_implement_shallow_specialized(setup); !specialized.ok())
    return specialized;
  if (conv_settings().kernel != KernelChoice::automatic)
    return cannot("another form forced by FLEXKIT_CONV_KERNEL");
  if (!setup.gathered_is_plain) return cannot("activations not a plain matrix");
  return gk::can_implement_shallow_transposed(setup.kernel, setup.args);
}

CanImplement can_implement_deep_k(const Setup& setup, int device, int sms) {
  if (!setup.b_is_plain) return cannot("not a 1x1 update over a plain input");
  const KernelChoice forced = conv_settings().kernel;
  if (forced != KernelChoice::automatic && forced != KernelChoice::specialized)
    return cannot("another kernel forced by FLEXKIT_CONV_KERNEL");
  gk::IntegerGemmArgs plain = setup.args;
  plain.b = setup.plain_b;
  if (!gk::deep_k_fits(plain, sms)) return cannot("both sides past 64 rows, or too many tiles");
  if (!deep_k_prepared(device)) return cannot("no sm_90a image");
  return kCanImplement;
}

// FLEXKIT_CONV_STREAM_K's CTA count, one per multiprocessor when unset.
int stream_k_ctas(int sms) {
  const std::optional<std::int64_t>& ctas = conv_settings().stream_k_ctas;
  return ctas ? static_cast<int>(*ctas) : sms;
}

gk::StreamKPlan stream_k_schedule(const Setup& setup, std::int64_t tiles, int sms) {
  return gk::plan_stream_k(tiles * setup.taps, setup.args.k, stream_k_ctas(sms));
}

// update only: fprop and bprop measured slower with it (their shared parts cost each CTA a
// pipeline restart, a parked epilogue and a finishing pass their shorter tiles do not repay).
CanImplement can_implement_stream_k(ImplicitDirection direction, const Setup& setup,
                                    std::int64_t tiles, int sms) {
  if (direction != ImplicitDirection::update) return cannot("fprop and bprop");
  if (stream_k_ctas(sms) == 0) return cannot("FLEXKIT_CONV_STREAM_K=0");
  if (stream_k_schedule(setup, tiles, sms).ctas == 0)
    return cannot("whole rounds of tiles nearly full, or tiles too deep or too shallow");
  return kCanImplement;
}

CanImplement can_implement_lean(const Setup& setup, std::int64_t tiles, int sms) {
  if (gk::wgmma_k_split(setup.args.k, tiles * setup.taps, sms).splits > 65535)
    return cannot("more than 65535 K splits");
  return kCanImplement;
}

// ---- the plans --------------------------------------------------------------------------------

ConvCudaPlan direct_plan(ImplicitDirection direction, const ConvProblem& p) {
  ConvCudaPlan plan;
  plan.kernel = ConvCudaKernel::direct;
  plan.kernel_name = kernel_name(plan.kernel);
  if (direction == ImplicitDirection::update) {
    const DirectUpdateSlices slices =
        direct_update_slices(p.g, p.x.kind == ElementKind::f32 ? sizeof(float) : sizeof(int64_t));
    plan.workspace_bytes = slices.partials_bytes;
    plan.choices = detail::cat("slices ", slices.slices, " of ", slices.slice_terms, " terms");
  } else {
    plan.choices = "one thread per output element";
  }
  return plan;
}

// The shallow kernels' persistent grid: each CTA owns one tile row and every ctas_per_row-th
// column tile of it, as many CTAs as multiprocessors (a row of tiles per CTA when the rows alone
// exceed them).
void plan_shallow(ConvCudaPlan& plan, int sms) {
  const std::int64_t ctas_per_row =
      std::max<std::int64_t>(1, std::min<std::int64_t>(plan.tiles_n, sms / plan.tiles_m));
  plan.ctas = plan.tiles_m * ctas_per_row;
  plan.splits = 1;
  plan.choices = detail::cat("tile 128x128 ctas ", plan.ctas);
}

void plan_stream_k_launch(ConvCudaPlan& plan, const Setup& setup, int sms) {
  plan.stream_k = stream_k_schedule(setup, plan.tiles_m * plan.tiles_n, sms);
  plan.ctas = stream_k_ctas(sms);
  plan.workspace_bytes = plan.stream_k.workspace_bytes;
  plan.choices = detail::cat(
      "tile 128x128 taps ", setup.taps, " stream-K: ", plan.stream_k.first_tile, " whole tiles, ",
      plan.stream_k.tiles - plan.stream_k.first_tile, " shared by ", plan.stream_k.ctas, " CTAs");
}

// K divided as the GEMM divides it.
void plan_lean(ConvCudaPlan& plan, const Setup& setup, int sms) {
  const std::int64_t tiles = plan.tiles_m * plan.tiles_n;
  const gk::WgmmaKSplit split = gk::wgmma_k_split(setup.args.k, tiles * setup.taps, sms);
  plan.splits = static_cast<std::int32_t>(split.splits);
  plan.k_chunk = split.k_chunk;
  if (plan.splits > 1)
    plan.workspace_bytes =
        static_cast<std::size_t>(setup.taps * setup.args.m * setup.args.n) * sizeof(std::int64_t);
  plan.choices = detail::cat("tile 128x128 taps ", setup.taps, " splits ", plan.splits);
}

ConvCudaPlan make_plan(ImplicitDirection direction, const ConvProblem& p, int device) {
  Setup setup;
  const CanImplement tensor_cores = tensor_cores_fit(direction, p, device, setup);
  if (!tensor_cores.ok()) {
    ConvCudaPlan plan = direct_plan(direction, p);
    plan.pass_over("cuda.implicit_gemm", tensor_cores);
    return plan;
  }
  ConvCudaPlan plan;
  plan.tiles_m = ceil_div(setup.args.m, gk::kWgmmaTileM);
  plan.tiles_n = ceil_div(setup.args.n, gk::kWgmmaTileN);
  const std::int64_t tiles = plan.tiles_m * plan.tiles_n;
  const int sms = backend::cuda::multiprocessors(device);
  auto take = [&](ConvCudaKernel kernel, const CanImplement& answer) {
    if (!answer.ok()) {
      plan.pass_over(kernel_name(kernel), answer);
      return false;
    }
    plan.kernel = kernel;
    plan.kernel_name = kernel_name(kernel);
    return true;
  };
  const CanImplement shallow = shallow_forms_fit(setup, device);
  if (shallow.ok()) {
    if (!take(ConvCudaKernel::shallow_transposed, can_implement_shallow_transposed(setup)) &&
        !take(ConvCudaKernel::shallow_specialized, can_implement_shallow_specialized(setup)))
      take(ConvCudaKernel::shallow, kCanImplement);  // u8 spikes, or lockstep forced
    plan_shallow(plan, sms);
    // (The transposed kernel sizes its own grid, from 64-column tiles.)
    if (plan.kernel == ConvCudaKernel::shallow_transposed) plan.choices = "tile 64 columns";
    return plan;
  }
  plan.pass_over("cuda.implicit_gemm.shallow*", shallow);
  if (take(ConvCudaKernel::deep_k, can_implement_deep_k(setup, device, sms))) {
    // Its sums go to one half of the stream's alternating workspace.
    plan.workspace_bytes = static_cast<std::size_t>(setup.args.m * setup.args.n) * 8;
    plan.choices = detail::cat("m ", setup.args.m, " n ", setup.args.n, " k ", setup.args.k);
  } else if (take(ConvCudaKernel::stream_k, can_implement_stream_k(direction, setup, tiles, sms))) {
    plan_stream_k_launch(plan, setup, sms);
  } else if (take(ConvCudaKernel::lean, can_implement_lean(setup, tiles, sms))) {
    plan_lean(plan, setup, sms);
  } else {
    ConvCudaPlan direct = direct_plan(direction, p);
    direct.passed_over = plan.passed_over;
    return direct;
  }
  return plan;
}

}  // namespace

const ConvCudaPlan& conv_cuda_plan(ImplicitDirection direction, const ConvProblem& p, int device) {
  using Cache = backend::PlanCache<ConvCudaKey, ConvCudaPlan>;
  static Cache caches[3] = {Cache("conv fprop"), Cache("conv bprop"), Cache("conv update")};
  const ConvCudaKey key = key_of(p, device);
  return caches[static_cast<int>(direction)].get(key, [&] {
    backend::cuda::DeviceGuard guard(device);  // the kernels' images are asked per device
    return make_plan(direction, p, device);
  });
}

}  // namespace flexkit::conv
