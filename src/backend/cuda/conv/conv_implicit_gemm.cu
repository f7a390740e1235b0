// Host side of the implicit-GEMM convolutions (conv_implicit_gemm.hpp): the settings, whether the
// kernels' images load, the ConvGather description of each direction and why a layout does not
// fit (conv_implicit_gemm_setup.hpp), and the launches of the kernel a plan chose
// (conv_cuda_plan.cu).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>

#include "backend/cuda/check.hpp"
#include "backend/cuda/conv/conv_implicit_gemm.hpp"
#include "backend/cuda/conv/conv_implicit_gemm_kernels.hpp"
#include "backend/cuda/conv/conv_implicit_gemm_setup.hpp"
#include "backend/cuda/gemm/gemm_deep_k.hpp"
#include "backend/cuda/gemm/gemm_kernel_args.cuh"
#include "backend/cuda/gemm/gemm_stream_k.hpp"
#include "backend/cuda/gemm/gemm_wgmma.hpp"
#include "backend/cuda/launch_support.hpp"
#include "core/environment.hpp"
#include "flexkit/error.hpp"

namespace flexkit::conv::implicit {

using backend::cannot;
using backend::kCanImplement;
using gemm::ElementKind;

namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

bool aligned(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

// Every stride a multiple of `unit` elements (16 bytes), or irrelevant because its extent is 1.
bool strides_fit(const std::int64_t* strides, const std::int64_t* extents, int count,
                 std::int64_t unit) {
  for (int i = 0; i < count; ++i)
    if (extents[i] > 1 && strides[i] % unit != 0) return false;
  return true;
}

}  // namespace

const ConvSettings& conv_settings() {
  static const ConvSettings read{
      flexkit::detail::env_choice("FLEXKIT_CONV_KERNEL", KernelChoice::automatic,
                                  {{"direct", KernelChoice::direct},
                                   {"lean", KernelChoice::lean},
                                   {"lockstep", KernelChoice::lockstep},
                                   {"specialized", KernelChoice::specialized}}),
      flexkit::detail::env_int("FLEXKIT_CONV_STREAM_K", 0, 65535)};
  return read;
}

bool prepared(int device, bool b_is_u8, gk::ImplicitKernel kernel, bool shallow) {
  static std::mutex mutex;
  static std::map<std::tuple<int, bool, gk::ImplicitKernel, bool>, bool> known;
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(device, b_is_u8, kernel, shallow);
  if (auto it = known.find(key); it != known.end()) return it->second;
  bool ok = gk::device_is_sm90(device);
  if (ok && shallow) {
    ok = gk::prepare_shallow(kernel, b_is_u8) &&
         (b_is_u8 ||
          (gk::prepare_shallow_specialized(kernel) && gk::prepare_shallow_transposed(kernel)));
  } else if (ok) {
    ok = b_is_u8 ? gk::prepare_gather_u8(kernel) : gk::prepare_gather_s16(kernel);
  }
  known.emplace(key, ok);
  return ok;
}

bool deep_k_prepared(int device) {
  static std::mutex mutex;
  static std::map<int, bool> known;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = known.find(device); it != known.end()) return it->second;
  const bool ok = gk::device_is_sm90(device) && gk::prepare_deep_k();
  known.emplace(device, ok);
  return ok;
}

namespace {

constexpr CanImplement kUpscale = cannot("an upscale");
constexpr CanImplement kTypes = cannot("not an integer product");
constexpr CanImplement kBatch =
    cannot("batch not a multiple of 8 (16 for u8), or n not unit stride");
constexpr CanImplement kUnaligned = cannot("an operand not 16-byte aligned");
constexpr CanImplement kStrides = cannot("strides that are not multiples of 16 bytes");
constexpr CanImplement kExtents = cannot("an extent past the kernels' 32-bit coordinates");

// The ConvGather and A view of fprop or bprop, or why the layout does not fit.
CanImplement describe_gathered(ImplicitDirection direction, const ConvProblem& p, Setup& s) {
  const Geometry& g = p.g;
  for (int d = 0; d < 3; ++d)
    if (g.up[d] != 1) return kUpscale;
  const bool fprop = direction == ImplicitDirection::fprop;
  // fprop gathers I (x) with the filter F (y) as A; bprop gathers E (y) with F (x) as A.
  const Operand& gathered = fprop ? p.x : p.y;
  const Operand& filter = fprop ? p.y : p.x;
  const bool b_is_u8 = gathered.kind == ElementKind::u8;
  if (filter.kind != ElementKind::flex16 ||
      (gathered.kind != ElementKind::flex16 && gathered.kind != ElementKind::u8))
    return kTypes;
  const std::int64_t chunk = b_is_u8 ? 16 : 8;  // elements per 16-byte copy
  const std::int64_t channels = fprop ? g.C : g.K;
  const std::int64_t rows = fprop ? g.K : g.C;
  const std::int64_t* in = fprop ? g.in : g.out;    // the gathered operand's extents
  const std::int64_t* cols = fprop ? g.out : g.in;  // positions of the GEMM's columns
  const std::int64_t* gs = gathered.stride;         // (channel, d0, d1, d2, n)
  const std::int64_t* fs = filter.stride;           // (c, t, r, s, k)
  if (g.N % chunk != 0 || gs[4] != 1) return kBatch;
  if (!aligned(gathered.data) || !aligned(filter.data)) return kUnaligned;
  const std::int64_t gathered_extents[4] = {channels, in[0], in[1], in[2]};
  if (!strides_fit(gs, gathered_extents, 4, chunk)) return kStrides;
  // A: fprop rows k (unit stride), k index channel c; bprop rows c, k index k (unit stride).
  const std::int64_t a_row_stride = fprop ? fs[4] : fs[0];
  const std::int64_t a_k_stride = fprop ? fs[0] : fs[4];
  const std::int64_t a_unit = fprop ? a_row_stride : a_k_stride;
  const std::int64_t a_other = fprop ? a_k_stride : a_row_stride;
  const std::int64_t a_other_extent = fprop ? channels : rows;
  if (a_unit != 1 && (fprop ? rows : channels) > 1) return cannot("the filter's k not unit stride");
  if (a_other_extent > 1 && a_other % 8 != 0) return kStrides;
  if (!strides_fit(fs + 1, g.flt, 3, 8)) return kStrides;

  const std::int64_t positions = cols[0] * cols[1] * cols[2];
  const std::int64_t stages_per_tap = ceil_div(channels, gk::kWgmmaStageK);
  const std::int64_t k = g.taps() * stages_per_tap * gk::kWgmmaStageK;
  if (k / gk::kWgmmaStageK > INT32_MAX) return kExtents;  // the stage walk counts in 32 bits
  // int32 fields of ConvGather and the int32 coordinates of the gather.
  constexpr std::int64_t kInt32 = INT32_MAX / 4;
  for (std::int64_t v : {channels, g.N, in[0], in[1], in[2], cols[0], cols[1], cols[2]})
    if (v > kInt32) return kExtents;
  for (int d = 0; d < 3; ++d)
    if (cols[d] * g.str[d] + g.pad[d] + g.flt[d] * g.dil[d] > kInt32) return kExtents;

  gk::IntegerGemmArgs& a = s.args;
  a.m = rows;
  a.n = positions * g.N;
  a.k = k;
  // The unit-stride axis is 1 apart (or has extent 1, where its stride is never used).
  a.a = fprop ? gk::OperandView{filter.data, 1, a_k_stride, 0}
              : gk::OperandView{filter.data, a_row_stride, 1, 0};
  a.b = {gathered.data, 0, 0, 0};
  a.c = {p.out.data, p.out.row_stride, p.out.col_stride, 0};
  a.epilogue = p.epilogue;
  a.b_is_u8 = b_is_u8;
  a.out_is_f32 = p.out.kind == ElementKind::f32;
  a.measure = p.mode == gemm::EpilogueMode::measure;
  gk::ConvGather& gg = a.gather;
  gg.channels = static_cast<int32_t>(channels);
  gg.channel_stages = static_cast<int32_t>(stages_per_tap);
  gg.batch = static_cast<int32_t>(g.N);
  gg.channel_stride = gs[0];
  for (int d = 0; d < 3; ++d) {
    gg.taps[d] = static_cast<int32_t>(g.flt[d]);
    gg.out[d] = static_cast<int32_t>(cols[d]);
    gg.in[d] = static_cast<int32_t>(in[d]);
    gg.in_stride[d] = gs[1 + d];
    gg.a_tap_stride[d] = fs[1 + d];
    if (fprop) {  // x = o·stride − pad + t·dil
      gg.out_step[d] = static_cast<int32_t>(g.str[d]);
      gg.base[d] = static_cast<int32_t>(-g.pad[d]);
      gg.tap_step[d] = static_cast<int32_t>(g.dil[d]);
      gg.divisor[d] = 1;
    } else {  // o = (x + pad − t·dil) / stride
      gg.out_step[d] = 1;
      gg.base[d] = static_cast<int32_t>(g.pad[d]);
      gg.tap_step[d] = static_cast<int32_t>(-g.dil[d]);
      gg.divisor[d] = static_cast<int32_t>(g.str[d]);
    }
  }
  gg.b_block_step = gk::kWgmmaStageK * gg.channel_stride;
  gg.a_block_step = gk::kWgmmaStageK * a.a.k_stride;
  gg.strided_gradient = gg.divisor[0] != 1 || gg.divisor[1] != 1 || gg.divisor[2] != 1;
  s.kernel = fprop ? gk::ImplicitKernel::fprop : gk::ImplicitKernel::bprop;
  bool plain = g.taps() == 1;
  for (int d = 0; d < 3; ++d) plain = plain && g.str[d] == 1 && g.pad[d] == 0 && in[d] == cols[d];
  s.gathered_is_plain = plain && (in[2] == 1 || gs[3] == g.N) &&
                        (in[1] == 1 || gs[2] == in[2] * g.N) &&
                        (in[0] == 1 || gs[1] == in[1] * in[2] * g.N);
  return kCanImplement;
}

// update: gradF[(c, tap), k] as one GEMM per tap, Cᵀ[k, c] = Σ_j E[k, j] · I[c, x(j, tap)], j =
// (position, n); E is a plain k-contiguous A, I the gathered k-contiguous B.
CanImplement describe_update(const ConvProblem& p, Setup& s) {
  const Geometry& g = p.g;
  for (int d = 0; d < 3; ++d)
    if (g.up[d] != 1) return kUpscale;
  const Operand& input = p.x;
  const Operand& grad = p.y;
  const bool b_is_u8 = input.kind == ElementKind::u8;
  if (grad.kind != ElementKind::flex16 ||
      (input.kind != ElementKind::flex16 && input.kind != ElementKind::u8))
    return kTypes;
  const std::int64_t chunk = b_is_u8 ? 16 : 8;
  const std::int64_t* is = input.stride;
  const std::int64_t* es = grad.stride;
  if (g.N % chunk != 0 || is[4] != 1) return kBatch;
  if (!aligned(input.data) || !aligned(grad.data)) return kUnaligned;
  const std::int64_t input_extents[4] = {g.C, g.in[0], g.in[1], g.in[2]};
  if (!strides_fit(is, input_extents, 4, chunk)) return kStrides;
  // E's (m, p, q, n) collapse into one unit stride: the k index of a plain A.
  if (es[4] != 1 || (g.out[2] > 1 && es[3] != g.N) || (g.out[1] > 1 && es[2] != g.out[2] * g.N) ||
      (g.out[0] > 1 && es[1] != g.out[1] * g.out[2] * g.N) || (g.K > 1 && es[0] % 8 != 0))
    return cannot("the gradient's (positions, n) not one unit stride");
  constexpr std::int64_t kInt32 = INT32_MAX / 4;
  for (std::int64_t v : {g.C, g.N, g.in[0], g.in[1], g.in[2], g.out[0], g.out[1], g.out[2]})
    if (v > kInt32) return kExtents;
  for (int d = 0; d < 3; ++d)
    if (g.out[d] * g.str[d] + g.pad[d] + g.flt[d] * g.dil[d] > kInt32) return kExtents;
  if (g.taps() > 65535) return cannot("more than 65535 taps");

  gk::IntegerGemmArgs& a = s.args;
  a.m = g.K;
  a.n = g.C;
  a.k = g.out_positions() * g.N;
  a.a = {grad.data, es[0], 1, 0};
  a.b = {input.data, 0, 0, 0};
  // Row (c, tap) of gradF is row c·taps + tap of the output matrix: GEMM row k, column c, tap z.
  a.c = {p.out.data, p.out.col_stride, g.taps() * p.out.row_stride, p.out.row_stride};
  a.epilogue = p.epilogue;
  a.b_is_u8 = b_is_u8;
  a.out_is_f32 = p.out.kind == ElementKind::f32;
  a.measure = p.mode == gemm::EpilogueMode::measure;
  gk::ConvGather& gg = a.gather;
  gg.batch = static_cast<int32_t>(g.N);
  gg.channel_stride = is[0];
  for (int d = 0; d < 3; ++d) {
    gg.taps[d] = static_cast<int32_t>(g.flt[d]);
    gg.out[d] = static_cast<int32_t>(g.out[d]);
    gg.in[d] = static_cast<int32_t>(g.in[d]);
    gg.in_stride[d] = is[1 + d];
    gg.out_step[d] = static_cast<int32_t>(g.str[d]);
    gg.base[d] = static_cast<int32_t>(-g.pad[d]);
    gg.tap_step[d] = static_cast<int32_t>(g.dil[d]);
    gg.divisor[d] = 1;
  }
  s.kernel = gk::ImplicitKernel::update;
  s.taps = g.taps();
  // A 1×1 filter at stride 1 without padding reads I at x = o: where I's (x0, x1, x2, n) are one
  // unit stride as well, I is a plain k-contiguous matrix (rows c), and update a plain GEMM.
  bool plain = g.taps() == 1 && (g.C == 1 || is[0] % 8 == 0);
  for (int d = 0; d < 3; ++d)
    plain = plain && g.str[d] == 1 && g.pad[d] == 0 && g.out[d] == g.in[d];
  plain = plain && (g.in[2] == 1 || is[3] == g.N) && (g.in[1] == 1 || is[2] == g.in[2] * g.N) &&
          (g.in[0] == 1 || is[1] == g.in[1] * g.in[2] * g.N);
  if (plain) s.plain_b = gk::OperandView{input.data, is[0], 1, 0};
  s.b_is_plain = plain;
  return kCanImplement;
}

// The lean kernel of the setup's direction and element type of B.
void launch_gathered(const Setup& s, bool stream_k, dim3 grid, cudaStream_t stream) {
  if (s.args.b_is_u8) {
    gk::launch_gather_u8(s.kernel, stream_k, grid, s.args, stream);
  } else {
    gk::launch_gather_s16(s.kernel, stream_k, grid, s.args, stream);
  }
}

[[noreturn]] void plan_mismatch(const char* what) {
  throw ValueError(std::string("conv on cuda: internal error: the planned ") + what +
                   " does not take the problem");
}

}  // namespace

CanImplement describe(ImplicitDirection direction, const ConvProblem& problem, Setup& setup) {
  return direction == ImplicitDirection::update ? describe_update(problem, setup)
                                                : describe_gathered(direction, problem, setup);
}

CanImplement shallow_fits(const Setup& s) {
  const gk::IntegerGemmArgs& a = s.args;
  if (s.kernel == gk::ImplicitKernel::update) return cannot("an update");
  if (a.k / gk::kWgmmaStageK > gk::shallow_max_stages()) return cannot("K past four stages");
  if (a.out_is_f32 || a.measure || !a.epilogue.integer_only)
    return cannot("not a flex16 store through the integer epilogue");
  const int lowest_scale = a.b_is_u8 ? 1 : portable::kByteProductRoundingMinShift;
  if (a.epilogue.scale < lowest_scale || a.epilogue.scale > 31)
    return cannot("a shift outside its 32-bit rounding");
  if (a.c.col_stride == 1 && a.c.row_stride % 2 == 0 && a.n % 2 == 0 &&
      reinterpret_cast<std::uintptr_t>(a.c.data) % 4 == 0 &&
      ceil_div(a.n, gk::kWgmmaTileN) <= INT32_MAX && a.m <= INT32_MAX)
    return kCanImplement;
  return cannot("output columns not unit-stride word pairs");
}

}  // namespace flexkit::conv::implicit

namespace flexkit::conv {

void run_implicit_gemm(const ConvCudaPlan& plan, ImplicitDirection direction,
                       const ConvProblem& problem, int device, cudaStream_t stream,
                       backend::cuda::DeviceStatsRecord& record) {
  using namespace implicit;
  Setup setup;
  if (!describe(direction, problem, setup).ok()) plan_mismatch("implicit GEMM");
  gk::IntegerGemmArgs& args = setup.args;
  args.tiles_m = static_cast<int32_t>(plan.tiles_m);
  args.tiles_n = static_cast<int32_t>(plan.tiles_n);
  args.stats = record.device_record();
  const int sms = backend::cuda::multiprocessors(device);
  switch (plan.kernel) {
    case ConvCudaKernel::shallow_transposed:
    case ConvCudaKernel::shallow_specialized:
    case ConvCudaKernel::shallow: {
      // Each CTA owns one tile row and every ctas_per_row-th column tile of it (plan.ctas in all).
      args.splits = 1;
      args.k_chunk = args.k;
      const dim3 grid(static_cast<unsigned>(plan.ctas));
      if (plan.kernel == ConvCudaKernel::shallow) {
        gk::launch_shallow(setup.kernel, args.b_is_u8 != 0, grid, args, stream);
        return;
      }
      // The transposed and warp-specialised kernels are the call's only kernel: their last CTA
      // publishes the statistics (no publish kernel behind them).
      args.stats_host = record.host_record_on_device();
      args.stats_arrivals = record.arrivals();
      if (plan.kernel == ConvCudaKernel::shallow_transposed) {
        if (!gk::launch_shallow_transposed(setup.kernel, args, sms, stream))
          plan_mismatch("transposed shallow kernel");
      } else {
        gk::launch_shallow_specialized(setup.kernel, grid, args, setup.gathered_is_plain, stream);
      }
      record.published_in_kernel();
      return;
    }
    case ConvCudaKernel::deep_k: {
      // Both operands k-contiguous, a small output over a long K: the deep-K kernel, its sums
      // added into a workspace of zeros and finished as the K split's are.
      gk::IntegerGemmArgs plain = args;
      plain.b = setup.plain_b;
      plain.stats_host = record.host_record_on_device();
      plain.stats_arrivals = record.arrivals();
      gk::launch_deep_k(plain, device, sms, stream);
      record.published_in_kernel();
      return;
    }
    case ConvCudaKernel::stream_k: {
      args.raw_stages = gk::wgmma_max_raw_stages(args.b_is_u8 != 0, gk::kWgmmaTileN);
      gk::apply_stream_k(plan.stream_k, args);
      backend::cuda::Scratch workspace(device, plan.stream_k.workspace_bytes);
      args.workspace = static_cast<unsigned long long*>(workspace.get());
      launch_gathered(setup, true, dim3(static_cast<unsigned>(plan.ctas)), stream);
      gk::launch_finish_stream_k(args, stream);
      return;
    }
    case ConvCudaKernel::lean: {
      args.raw_stages = gk::wgmma_max_raw_stages(args.b_is_u8 != 0, gk::kWgmmaTileN);
      args.k_chunk = plan.k_chunk;
      args.splits = plan.splits;
      const std::int64_t outputs = setup.taps * args.m * args.n;
      backend::cuda::Scratch workspace(device, plan.workspace_bytes);
      if (plan.splits > 1) {
        args.workspace = static_cast<unsigned long long*>(workspace.get());
        FLEXKIT_CUDA_CHECK(cudaMemsetAsync(workspace.get(), 0, plan.workspace_bytes, stream));
      }
      const dim3 grid(static_cast<unsigned>(plan.tiles_m * plan.tiles_n),
                      static_cast<unsigned>(plan.splits), static_cast<unsigned>(setup.taps));
      launch_gathered(setup, false, grid, stream);
      if (plan.splits > 1) gk::launch_finish_splits(args, outputs, device, stream);
      return;
    }
    case ConvCudaKernel::direct:
      break;
  }
  plan_mismatch("kernel (direct is not an implicit GEMM)");
}

}  // namespace flexkit::conv
