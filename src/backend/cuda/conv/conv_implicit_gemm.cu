// Host side of the implicit-GEMM convolutions (conv_implicit_gemm.hpp): whether the path fits, the
// ConvGather description of each direction, the split of K across CTAs and the launches.
#include "backend/cuda/conv/conv_implicit_gemm.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>

#include "backend/cuda/check.hpp"
#include "backend/cuda/conv/conv_implicit_gemm_kernels.hpp"
#include "backend/cuda/gemm/gemm_deep_k.hpp"
#include "backend/cuda/gemm/gemm_kernel_args.cuh"
#include "backend/cuda/gemm/gemm_stream_k.hpp"
#include "backend/cuda/gemm/gemm_wgmma.hpp"
#include "backend/cuda/launch_support.hpp"
#include "core/environment.hpp"
#include "flexkit/error.hpp"

namespace flexkit::conv {
namespace {

namespace gk = backend::cuda::gemm_kernels;
using gemm::ElementKind;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

// FLEXKIT_CONV_KERNEL: unset or empty, each call's own choice; otherwise a path forced for
// comparisons and tests. Any other value is an error, so that a misspelt one cannot silently
// measure the default.
enum class KernelChoice { automatic, direct, lean, lockstep, specialized };

// The convolution's settings, read from the environment once per process.
struct ConvSettings {
  KernelChoice kernel = KernelChoice::automatic;  // FLEXKIT_CONV_KERNEL
  // FLEXKIT_CONV_STREAM_K: the CTAs of a stream-K launch; unset, one per multiprocessor; 0, none
  // (stream-K off); a positive count, that many (to test whole rounds on small layers).
  std::optional<std::int64_t> stream_k_ctas;
  bool log = false;  // FLEXKIT_CONV_LOG=1
};

const ConvSettings& conv_settings() {
  static const ConvSettings read{
      flexkit::detail::env_choice("FLEXKIT_CONV_KERNEL", KernelChoice::automatic,
                                  {{"direct", KernelChoice::direct},
                                   {"lean", KernelChoice::lean},
                                   {"lockstep", KernelChoice::lockstep},
                                   {"specialized", KernelChoice::specialized}}),
      flexkit::detail::env_int("FLEXKIT_CONV_STREAM_K", 0, 65535),
      flexkit::detail::env_flag("FLEXKIT_CONV_LOG")};
  return read;
}

int stream_k_cta_count(int sms) {
  const std::optional<std::int64_t>& ctas = conv_settings().stream_k_ctas;
  return ctas ? static_cast<int>(*ctas) : sms;
}

// Each kernel's shared-memory limit is raised once per device; false where the device or the
// loaded image cannot run sm_90a code.
// `shallow`: the persistent kernels for K of at most four stages (gemm_shallow.cuh, and
// gemm_shallow_specialized.cuh for flex16 activations).
bool prepared(int device, bool b_is_u8, gk::ImplicitKernel kernel, bool shallow = false) {
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

// The same for the deep-K kernel (gemm_deep_k.cu).
bool deep_k_prepared(int device) {
  static std::mutex mutex;
  static std::map<int, bool> known;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = known.find(device); it != known.end()) return it->second;
  const bool ok = gk::device_is_sm90(device) && gk::prepare_deep_k();
  known.emplace(device, ok);
  return ok;
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

struct Setup {
  gk::IntegerGemmArgs args{};
  // update of a 1×1 filter whose B (the input) needs no gather: B as a plain matrix.
  bool b_is_plain = false;
  gk::OperandView plain_b{};
  // fprop or bprop of a 1×1 filter at stride 1 without padding, the gathered operand's positions
  // and n one unit stride: its channels are the rows of a plain matrix (channel_stride apart).
  bool gathered_is_plain = false;
  gk::ImplicitKernel kernel = gk::ImplicitKernel::fprop;
  std::int64_t taps = 1;  // grid z: update runs one GEMM per tap
};

// FLEXKIT_CONV_LOG's line for a launch on the tensor-core path; `schedule` says how K is shared.
void log_tensor_core_path(const char* name, const Setup& setup, const char* schedule) {
  const gk::IntegerGemmArgs& a = setup.args;
  std::fprintf(stderr,
               "flexkit conv %s: implicit GEMM on tensor cores (%lld x m %lld n %lld k %lld, B %s, "
               "%s)\n",
               name, static_cast<long long>(setup.taps), static_cast<long long>(a.m),
               static_cast<long long>(a.n), static_cast<long long>(a.k),
               a.b_is_u8 ? "u8" : "flex16", schedule);
}

// The ConvGather and A view of one direction, or false where the layout does not fit.
bool describe(ImplicitDirection direction, const ConvProblem& p, Setup& s) {
  const Geometry& g = p.g;
  for (int d = 0; d < 3; ++d)
    if (g.up[d] != 1) return false;
  const bool fprop = direction == ImplicitDirection::fprop;
  // fprop gathers I (x) with the filter F (y) as A; bprop gathers E (y) with F (x) as A.
  const Operand& gathered = fprop ? p.x : p.y;
  const Operand& filter = fprop ? p.y : p.x;
  const bool b_is_u8 = gathered.kind == ElementKind::u8;
  if (filter.kind != ElementKind::flex16 ||
      (gathered.kind != ElementKind::flex16 && gathered.kind != ElementKind::u8))
    return false;
  const std::int64_t chunk = b_is_u8 ? 16 : 8;  // elements per 16-byte copy
  const std::int64_t channels = fprop ? g.C : g.K;
  const std::int64_t rows = fprop ? g.K : g.C;
  const std::int64_t* in = fprop ? g.in : g.out;    // the gathered operand's extents
  const std::int64_t* cols = fprop ? g.out : g.in;  // positions of the GEMM's columns
  const std::int64_t* gs = gathered.stride;         // (channel, d0, d1, d2, n)
  const std::int64_t* fs = filter.stride;           // (c, t, r, s, k)
  if (g.N % chunk != 0 || gs[4] != 1 || !aligned(gathered.data) || !aligned(filter.data))
    return false;
  const std::int64_t gathered_extents[4] = {channels, in[0], in[1], in[2]};
  if (!strides_fit(gs, gathered_extents, 4, chunk)) return false;
  // A: fprop rows k (unit stride), k index channel c; bprop rows c, k index k (unit stride).
  const std::int64_t a_row_stride = fprop ? fs[4] : fs[0];
  const std::int64_t a_k_stride = fprop ? fs[0] : fs[4];
  const std::int64_t a_unit = fprop ? a_row_stride : a_k_stride;
  const std::int64_t a_other = fprop ? a_k_stride : a_row_stride;
  const std::int64_t a_other_extent = fprop ? channels : rows;
  if (a_unit != 1 && (fprop ? rows : channels) > 1) return false;
  if (a_other_extent > 1 && a_other % 8 != 0) return false;
  if (!strides_fit(fs + 1, g.flt, 3, 8)) return false;

  const std::int64_t positions = cols[0] * cols[1] * cols[2];
  const std::int64_t stages_per_tap = ceil_div(channels, gk::kWgmmaStageK);
  const std::int64_t k = g.taps() * stages_per_tap * gk::kWgmmaStageK;
  if (k / gk::kWgmmaStageK > INT32_MAX) return false;  // the stage walk counts in 32 bits
  // int32 fields of ConvGather and the int32 coordinates of the gather.
  constexpr std::int64_t kInt32 = INT32_MAX / 4;
  for (std::int64_t v : {channels, g.N, in[0], in[1], in[2], cols[0], cols[1], cols[2]})
    if (v > kInt32) return false;
  for (int d = 0; d < 3; ++d)
    if (cols[d] * g.str[d] + g.pad[d] + g.flt[d] * g.dil[d] > kInt32) return false;

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
  return true;
}

// update: gradF[(c, tap), k] as one GEMM per tap, Cᵀ[k, c] = Σ_j E[k, j] · I[c, x(j, tap)], j =
// (position, n); E is a plain k-contiguous A, I the gathered k-contiguous B.
bool describe_update(const ConvProblem& p, Setup& s) {
  const Geometry& g = p.g;
  for (int d = 0; d < 3; ++d)
    if (g.up[d] != 1) return false;
  const Operand& input = p.x;
  const Operand& grad = p.y;
  const bool b_is_u8 = input.kind == ElementKind::u8;
  if (grad.kind != ElementKind::flex16 ||
      (input.kind != ElementKind::flex16 && input.kind != ElementKind::u8))
    return false;
  const std::int64_t chunk = b_is_u8 ? 16 : 8;
  const std::int64_t* is = input.stride;
  const std::int64_t* es = grad.stride;
  if (g.N % chunk != 0 || is[4] != 1 || !aligned(input.data) || !aligned(grad.data)) return false;
  const std::int64_t input_extents[4] = {g.C, g.in[0], g.in[1], g.in[2]};
  if (!strides_fit(is, input_extents, 4, chunk)) return false;
  // E's (m, p, q, n) collapse into one unit stride: the k index of a plain A.
  if (es[4] != 1 || (g.out[2] > 1 && es[3] != g.N) || (g.out[1] > 1 && es[2] != g.out[2] * g.N) ||
      (g.out[0] > 1 && es[1] != g.out[1] * g.out[2] * g.N) || (g.K > 1 && es[0] % 8 != 0))
    return false;
  constexpr std::int64_t kInt32 = INT32_MAX / 4;
  for (std::int64_t v : {g.C, g.N, g.in[0], g.in[1], g.in[2], g.out[0], g.out[1], g.out[2]})
    if (v > kInt32) return false;
  for (int d = 0; d < 3; ++d)
    if (g.out[d] * g.str[d] + g.pad[d] + g.flt[d] * g.dil[d] > kInt32) return false;
  if (g.taps() > 65535) return false;

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
  return true;
}

// Whether the shallow persistent kernel takes a described fprop or bprop: K of at most four
// 64-deep stages (1×1 layers with up to 256 reduced channels), a flex16 output written with the
// pure integer epilogue (no f32 output, no measuring pass, no beta), the shift its 32-bit
// rounding covers, and column pairs it can store as one word. FLEXKIT_CONV_KERNEL=lean keeps
// the one-tile-per-CTA kernel.
bool shallow_fits(const Setup& s) {
  const gk::IntegerGemmArgs& a = s.args;
  if (s.kernel == gk::ImplicitKernel::update || conv_settings().kernel == KernelChoice::lean)
    return false;
  if (a.k / gk::kWgmmaStageK > gk::shallow_max_stages() || a.out_is_f32 || a.measure ||
      !a.epilogue.integer_only)
    return false;
  const int lowest_scale = a.b_is_u8 ? 1 : 16;
  if (a.epilogue.scale < lowest_scale || a.epilogue.scale > 31) return false;
  return a.c.col_stride == 1 && a.c.row_stride % 2 == 0 && a.n % 2 == 0 &&
         reinterpret_cast<std::uintptr_t>(a.c.data) % 4 == 0 &&
         ceil_div(a.n, gk::kWgmmaTileN) <= INT32_MAX && a.m <= INT32_MAX;
}

// The lean kernel of the setup's direction and element type of B.
void launch_gathered(const Setup& s, bool stream_k, dim3 grid, cudaStream_t stream) {
  if (s.args.b_is_u8) {
    gk::launch_gather_u8(s.kernel, stream_k, grid, s.args, stream);
  } else {
    gk::launch_gather_s16(s.kernel, stream_k, grid, s.args, stream);
  }
}

}  // namespace

bool implicit_gemm_cuda(ImplicitDirection direction, const ConvProblem& problem, int device,
                        cudaStream_t stream, backend::cuda::DeviceStatsRecord& record) {
  const ConvSettings& settings = conv_settings();  // throws for an unknown value first
  if (settings.kernel == KernelChoice::direct) return false;
  Setup setup;
  const bool described = direction == ImplicitDirection::update
                             ? describe_update(problem, setup)
                             : describe(direction, problem, setup);
  const bool fits = described && prepared(device, setup.args.b_is_u8 != 0, setup.kernel);
  const char* name = direction == ImplicitDirection::fprop   ? "fprop"
                     : direction == ImplicitDirection::bprop ? "bprop"
                                                             : "update";
  if (!fits) {
    if (settings.log)
      std::fprintf(stderr, "flexkit conv %s: direct kernels (layout or device)\n", name);
    return false;
  }
  gk::IntegerGemmArgs& args = setup.args;
  const std::int64_t tiles_m = ceil_div(args.m, gk::kWgmmaTileM);
  const std::int64_t tiles_n = ceil_div(args.n, gk::kWgmmaTileN);
  if (tiles_m * tiles_n > INT32_MAX) return false;
  args.tiles_m = static_cast<int32_t>(tiles_m);
  args.tiles_n = static_cast<int32_t>(tiles_n);
  args.stats = record.device_record();
  const int sms = backend::cuda::multiprocessors(device);
  if (shallow_fits(setup) && prepared(device, args.b_is_u8 != 0, setup.kernel, true)) {
    // Each CTA owns one tile row and every ctas_per_row-th column tile of it: as many CTAs as
    // there are multiprocessors (a row of tiles per CTA when the rows alone exceed them).
    const std::int64_t ctas_per_row = std::max<std::int64_t>(1, std::min(tiles_n, sms / tiles_m));
    args.splits = 1;
    args.k_chunk = args.k;
    // flex16 activations take the warp-specialised form (FLEXKIT_CONV_KERNEL=lockstep: the
    // one-role kernel, for comparisons).
    const bool specialized = args.b_is_u8 == 0 && settings.kernel != KernelChoice::lockstep;
    const dim3 grid(static_cast<unsigned>(tiles_m * ctas_per_row));
    if (specialized) {
      // The transposed and warp-specialised kernels are the call's only kernel: their last CTA
      // publishes the statistics (no publish kernel behind them).
      args.stats_host = record.host_record_on_device();
      args.stats_arrivals = record.arrivals();
    }
    // At most 64 output rows (or 256 over one stage) over a plain gathered operand: the
    // transposed form, unless the warp-specialised one is asked for
    // (FLEXKIT_CONV_KERNEL=specialized).
    if (specialized && setup.gathered_is_plain && settings.kernel == KernelChoice::automatic &&
        gk::launch_shallow_transposed(setup.kernel, args, sms, stream)) {
      record.published_in_kernel();
      if (settings.log)
        std::fprintf(stderr,
                     "flexkit conv %s: shallow transposed implicit GEMM (m %lld n %lld k %lld, B "
                     "flex16 in registers)\n",
                     name, static_cast<long long>(args.m), static_cast<long long>(args.n),
                     static_cast<long long>(args.k));
      return true;
    }
    bool b_by_tma = false;
    if (specialized) {
      b_by_tma =
          gk::launch_shallow_specialized(setup.kernel, grid, args, setup.gathered_is_plain, stream);
      record.published_in_kernel();
    } else {
      gk::launch_shallow(setup.kernel, args.b_is_u8 != 0, grid, args, stream);
    }
    if (settings.log)
      std::fprintf(stderr,
                   "flexkit conv %s: shallow persistent implicit GEMM%s (m %lld n %lld k %lld, B "
                   "%s%s, %lld CTAs)\n",
                   name, specialized ? ", warp-specialised" : "", static_cast<long long>(args.m),
                   static_cast<long long>(args.n), static_cast<long long>(args.k),
                   args.b_is_u8 ? "u8" : "flex16", b_by_tma ? " by bulk tensor loads" : "",
                   static_cast<long long>(tiles_m * ctas_per_row));
    return true;
  }
  if (setup.b_is_plain && (settings.kernel == KernelChoice::automatic ||
                           settings.kernel == KernelChoice::specialized)) {
    gk::IntegerGemmArgs plain = args;
    plain.b = setup.plain_b;
    if (gk::deep_k_fits(plain, sms) && deep_k_prepared(device)) {
      // Both operands k-contiguous, a small output over a long K: the deep-K kernel, its sums
      // added into a workspace of zeros and finished as the K split's are.
      if (settings.log)
        std::fprintf(stderr, "flexkit conv update: deep-K kernel (m %lld n %lld k %lld)\n",
                     static_cast<long long>(plain.m), static_cast<long long>(plain.n),
                     static_cast<long long>(plain.k));
      plain.stats_host = record.host_record_on_device();
      plain.stats_arrivals = record.arrivals();
      gk::launch_deep_k(plain, device, sms, stream);
      record.published_in_kernel();
      return true;
    }
  }
  const std::int64_t ctas = tiles_m * tiles_n * setup.taps;
  args.raw_stages = gk::wgmma_max_raw_stages(args.b_is_u8 != 0, gk::kWgmmaTileN);
  // update: stream-K where whole tiles would leave a partly empty last wave, one CTA per
  // multiprocessor (FLEXKIT_CONV_STREAM_K=0: off, the K split below instead; =n > 0: n CTAs, for
  // tests). Measured on the H200, 3×3 update C512 7×7 (144 tiles of 49 stages) went from 0.143
  // to 0.111 ms and C256 14×14 (36 tiles of 196) from 0.120 to 0.114. fprop and bprop measured
  // slower with it (C256 14×14: 0.111 → 0.125 ms, C512 7×7: 0.111 → 0.118): their shared parts
  // cost each CTA a pipeline restart, a parked epilogue and a finishing pass that their shorter
  // tiles (36 and 72 stages) do not repay.
  const int stream_k_ctas = direction == ImplicitDirection::update ? stream_k_cta_count(sms) : 0;
  const gk::StreamKPlan stream_k =
      stream_k_ctas == 0 ? gk::StreamKPlan{} : gk::plan_stream_k(ctas, args.k, stream_k_ctas);
  if (stream_k.ctas > 0) {
    gk::apply_stream_k(stream_k, args);
    if (settings.log) {
      char schedule[96];
      std::snprintf(schedule, sizeof schedule, "stream-K: %lld whole tiles, %lld shared by %d CTAs",
                    static_cast<long long>(stream_k.first_tile),
                    static_cast<long long>(stream_k.tiles - stream_k.first_tile), stream_k.ctas);
      log_tensor_core_path(name, setup, schedule);
    }
    backend::cuda::Scratch workspace(device, stream_k.workspace_bytes);
    args.workspace = static_cast<unsigned long long*>(workspace.get());
    launch_gathered(setup, true, dim3(static_cast<unsigned>(stream_k_ctas)), stream);
    gk::launch_finish_stream_k(args, stream);
    return true;
  }
  // K divided as the GEMM divides it.
  const gk::WgmmaKSplit split = gk::wgmma_k_split(args.k, ctas, sms);
  const std::int64_t splits = split.splits;
  args.k_chunk = split.k_chunk;
  if (splits > 65535) return false;
  args.splits = static_cast<int32_t>(splits);
  if (settings.log) {
    char schedule[32];
    std::snprintf(schedule, sizeof schedule, "splits %d", args.splits);
    log_tensor_core_path(name, setup, schedule);
  }

  const std::int64_t outputs = setup.taps * args.m * args.n;
  backend::cuda::Scratch workspace(
      device, splits > 1 ? static_cast<std::size_t>(outputs) * sizeof(std::int64_t) : 0);
  if (splits > 1) {
    args.workspace = static_cast<unsigned long long*>(workspace.get());
    FLEXKIT_CUDA_CHECK(cudaMemsetAsync(
        workspace.get(), 0, static_cast<std::size_t>(outputs) * sizeof(std::int64_t), stream));
  }
  const dim3 grid(static_cast<unsigned>(tiles_m * tiles_n), static_cast<unsigned>(splits),
                  static_cast<unsigned>(setup.taps));
  launch_gathered(setup, false, grid, stream);
  if (splits > 1) gk::launch_finish_splits(args, outputs, device, stream);
  return true;
}

}  // namespace flexkit::conv
