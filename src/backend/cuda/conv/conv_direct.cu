// Direct CUDA convolution (see conv_direct.hpp): correctness and determinism first.
//
// - fprop: one thread per output element (k, position, n) sums over (tap, c).
// - bprop: a gather, one thread per grad_input element (c, position, n) sums over every
//   (tap, upscale phase, k) whose output position reads it, so no two threads write one element.
// - update: each filter element (row = (c, tap), k) reduces over N × output positions, a reduction
//   too long for one thread: blocks of kThreads sum fixed slices of it (a fixed tree inside the
//   block), then a second kernel adds each element's slice partials in slice order and finishes.
//
// Integer products accumulate exactly in int64 (an int16 × int16 or u8 × int16 product fits int32)
// and are finished by the portable epilogue, so they are bit-identical to the CPU whatever the
// launch shape. f32 products sum with fmaf in an order fixed by the geometry alone (the slice
// length does not depend on the device either), so repeated runs are bit-identical; they are not
// the CPU's order. Statistics are max / min / sum of integers, reduced per block and committed with
// integer atomics, which are order-free.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/check.hpp"
#include "backend/cuda/conv/conv_direct.hpp"
#include "backend/cuda/conv/conv_implicit_gemm.hpp"
#include "backend/cuda/exact_stats_commit.cuh"
#include "backend/cuda/launch_support.hpp"
#include "backend/cuda/pending_stats.hpp"
#include "core/text.hpp"
#include "flexkit/error.hpp"
#include "flexkit/portable/gemm_epilogue.hpp"

namespace flexkit::conv {
namespace {

using gemm::ElementKind;
using portable::GemmStats;

constexpr int kThreads = 256;
// Grid-stride kernels need no more blocks than keep every multiprocessor busy.
constexpr std::int64_t kBlocksPerSm = 32;
// update: terms one block sums for one filter element (16 per thread), and the most slice
// partials one call keeps (int64: 128 MiB); longer reductions get longer slices.
constexpr std::int64_t kSliceTerms = 16 * kThreads;
constexpr std::int64_t kMaxPartials = std::int64_t{1} << 24;

struct Args {
  Geometry g;
  Operand x, y;  // fprop: I, F; bprop: F, E; update: I, E
  gemm::OutputRef out;
  portable::GemmEpilogue epilogue;
  bool measure;
  float alpha, beta;  // f32 products
  GemmStats* stats;   // integer products
  void* partials;     // update: elements × slices accumulators
  std::int64_t slices, slice_terms;
};

// ---- geometry (the definitions of conv_lower.hpp, here for device code) --------------------

// The input index (before upscaling) that output position o reads through tap t along dim d, or
// −1 where it reads padding.
__device__ __forceinline__ std::int64_t input_at(const Geometry& g, int d, std::int64_t o,
                                                 std::int64_t t) {
  const std::int64_t x = o * g.str[d] - g.pad[d] + t * g.dil[d];
  if (x < 0 || x >= g.in[d] * g.up[d]) return -1;
  return x / g.up[d];
}

// The output index whose tap t reads upscaled input position i·up + u along dim d, or −1 where
// none does (between strides or outside the output).
__device__ __forceinline__ std::int64_t output_at(const Geometry& g, int d, std::int64_t i,
                                                  std::int64_t u, std::int64_t t) {
  const std::int64_t num = i * g.up[d] + u + g.pad[d] - t * g.dil[d];
  if (num < 0 || num % g.str[d] != 0) return -1;
  const std::int64_t o = num / g.str[d];
  return o < g.out[d] ? o : -1;
}

// ---- products -----------------------------------------------------------------------------

__device__ __forceinline__ float load(const float* p) {
  return *p;
}
__device__ __forceinline__ std::int32_t load(const std::int16_t* p) {
  return *p;
}
__device__ __forceinline__ std::int32_t load(const std::uint8_t* p) {
  return *p;
}

// |int16 · int16| ≤ 2^30 and |u8 · int16| < 2^23: the product is exact in int32, the sum in int64.
__device__ __forceinline__ void mac(std::int64_t& acc, std::int32_t a, std::int32_t b) {
  acc += static_cast<std::int64_t>(a * b);
}
__device__ __forceinline__ void mac(float& acc, float a, float b) {
  acc = __fmaf_rn(a, b, acc);
}

template <typename Acc>
constexpr bool kInteger = std::is_same_v<Acc, std::int64_t>;

// ---- finishing an output element ------------------------------------------------------------

// Output matrix element (row, col) from its accumulator: the portable epilogue for integer
// products (store or measure), alpha · acc + beta · old for f32 products (as the CPU writes it).
template <typename Acc>
__device__ __forceinline__ void finish(const Args& a, std::int64_t row, std::int64_t col, Acc acc,
                                       GemmStats& stats) {
  const std::int64_t at = row * a.out.row_stride + col * a.out.col_stride;
  if constexpr (!kInteger<Acc>) {
    float* o = static_cast<float*>(a.out.data) + at;
    const float scaled = __fmul_rn(a.alpha, acc);
    *o = a.beta == 0.0f ? scaled : __fadd_rn(scaled, __fmul_rn(a.beta, *o));
  } else {
    const portable::GemmEpilogue& e = a.epilogue;
    if (a.out.kind == ElementKind::flex16) {
      std::int16_t* o = static_cast<std::int16_t*>(a.out.data) + at;
      const std::int16_t old = e.reads_old ? *o : std::int16_t{0};
      if (a.measure) {
        portable::gemm_stats_measure(stats, e, acc, old);
        return;
      }
      const portable::Flex16Code code = portable::gemm_flex16_result(e, acc, old);
      *o = code.m;
      portable::gemm_stats_store(stats, code);
    } else {
      float* o = static_cast<float*>(a.out.data) + at;
      if (a.measure) {  // never asked for (the exact policy is flex16 only); harmless
        portable::gemm_stats_measure(stats, e, acc, 0);
        return;
      }
      *o = portable::gemm_f32_result(e, acc, e.reads_old ? *o : 0.0f);
    }
  }
}

// ---- kernels ---------------------------------------------------------------------------------

// O[k, m, p, q, n] = Σ_{t, r, s, c} I[c, x0, x1, x2, n] · F[c, t, r, s, k]; output matrix
// row k, column position·N + n.
template <typename TI, typename TF, typename Acc>
__global__ void __launch_bounds__(kThreads) fprop_kernel(const __grid_constant__ Args a) {
  const Geometry& g = a.g;
  const TI* in = static_cast<const TI*>(a.x.data);
  const TF* flt = static_cast<const TF*>(a.y.data);
  const std::int64_t* si = a.x.stride;
  const std::int64_t* sf = a.y.stride;
  const std::int64_t N = g.N, P = g.out[1], Q = g.out[2];
  const std::int64_t positions = g.out[0] * P * Q, total = g.K * positions * N;
  GemmStats stats = portable::gemm_stats_identity();
  for (std::int64_t i = std::int64_t{blockIdx.x} * kThreads + threadIdx.x; i < total;
       i += std::int64_t{gridDim.x} * kThreads) {
    const std::int64_t n = i % N, pos = (i / N) % positions, k = i / (N * positions);
    const std::int64_t m = pos / (P * Q), p = (pos / Q) % P, q = pos % Q;
    Acc acc{};
    for (std::int64_t t = 0; t < g.flt[0]; ++t) {
      const std::int64_t x0 = input_at(g, 0, m, t);
      if (x0 < 0) continue;
      for (std::int64_t r = 0; r < g.flt[1]; ++r) {
        const std::int64_t x1 = input_at(g, 1, p, r);
        if (x1 < 0) continue;
        for (std::int64_t s = 0; s < g.flt[2]; ++s) {
          const std::int64_t x2 = input_at(g, 2, q, s);
          if (x2 < 0) continue;
          const TI* ip = in + x0 * si[1] + x1 * si[2] + x2 * si[3] + n * si[4];
          const TF* fp = flt + t * sf[1] + r * sf[2] + s * sf[3] + k * sf[4];
          for (std::int64_t c = 0; c < g.C; ++c)
            mac(acc, load(ip + c * si[0]), load(fp + c * sf[0]));
        }
      }
    }
    finish(a, k, pos * N + n, acc, stats);
  }
  if constexpr (kInteger<Acc>) backend::cuda::commit_block_stats(stats, a.stats);
}

// gradI[c, d, h, w, n] = Σ over taps (t, r, s), upscale phases (u0, u1, u2) and k of
// F[c, t, r, s, k] · E[k, o0, o1, o2, n], where o = the output position whose tap reads upscaled
// input position (d·up0 + u0, …); output matrix row c, column position·N + n.
template <typename T, typename Acc>
__global__ void __launch_bounds__(kThreads) bprop_kernel(const __grid_constant__ Args a) {
  const Geometry& g = a.g;
  const T* flt = static_cast<const T*>(a.x.data);
  const T* grad = static_cast<const T*>(a.y.data);
  const std::int64_t* sf = a.x.stride;
  const std::int64_t* se = a.y.stride;
  const std::int64_t N = g.N, H = g.in[1], W = g.in[2];
  const std::int64_t positions = g.in[0] * H * W, total = g.C * positions * N;
  GemmStats stats = portable::gemm_stats_identity();
  for (std::int64_t i = std::int64_t{blockIdx.x} * kThreads + threadIdx.x; i < total;
       i += std::int64_t{gridDim.x} * kThreads) {
    const std::int64_t n = i % N, pos = (i / N) % positions, c = i / (N * positions);
    const std::int64_t d = pos / (H * W), h = (pos / W) % H, w = pos % W;
    Acc acc{};
    for (std::int64_t t = 0; t < g.flt[0]; ++t)
      for (std::int64_t u0 = 0; u0 < g.up[0]; ++u0) {
        const std::int64_t o0 = output_at(g, 0, d, u0, t);
        if (o0 < 0) continue;
        for (std::int64_t r = 0; r < g.flt[1]; ++r)
          for (std::int64_t u1 = 0; u1 < g.up[1]; ++u1) {
            const std::int64_t o1 = output_at(g, 1, h, u1, r);
            if (o1 < 0) continue;
            for (std::int64_t s = 0; s < g.flt[2]; ++s)
              for (std::int64_t u2 = 0; u2 < g.up[2]; ++u2) {
                const std::int64_t o2 = output_at(g, 2, w, u2, s);
                if (o2 < 0) continue;
                const T* fp = flt + c * sf[0] + t * sf[1] + r * sf[2] + s * sf[3];
                const T* ep = grad + o0 * se[1] + o1 * se[2] + o2 * se[3] + n * se[4];
                for (std::int64_t k = 0; k < g.K; ++k)
                  mac(acc, load(fp + k * sf[4]), load(ep + k * se[0]));
              }
          }
      }
    finish(a, c, pos * N + n, acc, stats);
  }
  if constexpr (kInteger<Acc>) backend::cuda::commit_block_stats(stats, a.stats);
}

// update, first pass: partials[element · slices + slice] = the sum over reduction indices
// j ∈ [slice·slice_terms, …) (j = output position·N + n) of I[c, x(pos, tap), n] · E[k, pos, n],
// element = (c·taps + tap)·K + k. Thread τ takes j ≡ τ (mod kThreads) in order; the block then
// adds the threads' sums in a fixed tree, so an f32 partial has one order too.
template <typename TI, typename TE, typename Acc>
__global__ void __launch_bounds__(kThreads) update_partials_kernel(const __grid_constant__ Args a) {
  __shared__ Acc sums[kThreads];
  const Geometry& g = a.g;
  const TI* in = static_cast<const TI*>(a.x.data);
  const TE* grad = static_cast<const TE*>(a.y.data);
  const std::int64_t* si = a.x.stride;
  const std::int64_t* se = a.y.stride;
  const std::int64_t N = g.N, P = g.out[1], Q = g.out[2];
  const std::int64_t R = g.flt[1], S = g.flt[2], taps = g.flt[0] * R * S;
  const std::int64_t terms = g.out[0] * P * Q * N;
  const std::int64_t blocks = g.C * taps * g.K * a.slices;
  Acc* partials = static_cast<Acc*>(a.partials);
  const int tid = static_cast<int>(threadIdx.x);
  for (std::int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {  // uniform across the block
    const std::int64_t element = b / a.slices, slice = b % a.slices;
    const std::int64_t k = element % g.K, row = element / g.K;
    const std::int64_t c = row / taps, tap = row % taps;
    const std::int64_t t = tap / (R * S), r = (tap / S) % R, s = tap % S;
    const TI* ic = in + c * si[0];
    const TE* ek = grad + k * se[0];
    const std::int64_t j0 = slice * a.slice_terms;
    const std::int64_t j1 = terms - j0 < a.slice_terms ? terms : j0 + a.slice_terms;
    Acc acc{};
    for (std::int64_t j = j0 + tid; j < j1; j += kThreads) {
      const std::int64_t n = j % N, pos = j / N;
      const std::int64_t m = pos / (P * Q), p = (pos / Q) % P, q = pos % Q;
      const std::int64_t x0 = input_at(g, 0, m, t), x1 = input_at(g, 1, p, r),
                         x2 = input_at(g, 2, q, s);
      if (x0 < 0 || x1 < 0 || x2 < 0) continue;
      mac(acc, load(ic + x0 * si[1] + x1 * si[2] + x2 * si[3] + n * si[4]),
          load(ek + m * se[1] + p * se[2] + q * se[3] + n * se[4]));
    }
    sums[tid] = acc;
    __syncthreads();
    for (int half = kThreads / 2; half > 0; half >>= 1) {
      if (tid < half) {
        if constexpr (kInteger<Acc>)
          sums[tid] += sums[tid + half];
        else
          sums[tid] = __fadd_rn(sums[tid], sums[tid + half]);
      }
      __syncthreads();
    }
    if (tid == 0) partials[b] = sums[0];
    __syncthreads();  // sums is rewritten for the next element
  }
}

// update, second pass: each element's partials added in slice order, then finished into output
// matrix row c·taps + tap, column k.
template <typename Acc>
__global__ void __launch_bounds__(kThreads) update_finish_kernel(const __grid_constant__ Args a) {
  const Geometry& g = a.g;
  const std::int64_t elements = g.C * g.flt[0] * g.flt[1] * g.flt[2] * g.K;
  const Acc* partials = static_cast<const Acc*>(a.partials);
  GemmStats stats = portable::gemm_stats_identity();
  for (std::int64_t e = std::int64_t{blockIdx.x} * kThreads + threadIdx.x; e < elements;
       e += std::int64_t{gridDim.x} * kThreads) {
    const Acc* p = partials + e * a.slices;
    Acc total = p[0];
    for (std::int64_t s = 1; s < a.slices; ++s) {
      if constexpr (kInteger<Acc>)
        total += p[s];
      else
        total = __fadd_rn(total, p[s]);
    }
    finish(a, e / g.K, e % g.K, total, stats);
  }
  if constexpr (kInteger<Acc>) backend::cuda::commit_block_stats(stats, a.stats);
}

// ---- host side -------------------------------------------------------------------------------

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

unsigned grid_for(std::int64_t blocks, int device) {
  const std::int64_t cap = kBlocksPerSm * backend::cuda::multiprocessors(device);
  return static_cast<unsigned>(std::clamp<std::int64_t>(blocks, 1, cap));
}

unsigned grid_for_items(std::int64_t items, int device) {
  return grid_for(ceil_div(items, kThreads), device);
}

[[noreturn]] void internal(const char* direction, const char* what) {
  throw ValueError(detail::cat("conv ", direction, " on cuda: internal error: ", what));
}

// The dispatcher's guarantees (conv.cpp), checked once more where a slip would read or write
// the wrong memory.
void check_problem(const ConvProblem& p, const char* direction) {
  const Geometry& g = p.g;
  if (!p.x.data || !p.y.data || !p.out.data) internal(direction, "a null operand");
  for (std::int64_t v : {g.C, g.K, g.N})
    if (v < 1) internal(direction, "an empty channel or batch extent");
  for (int d = 0; d < 3; ++d)
    if (g.in[d] < 1 || g.flt[d] < 1 || g.out[d] < 1 || g.str[d] < 1 || g.dil[d] < 1 ||
        g.up[d] < 1 || g.pad[d] < 0)
      internal(direction, "an invalid geometry");
  if (p.out.kind == ElementKind::u8) internal(direction, "a u8 output");
  if (p.x.kind == ElementKind::f32) {
    if (p.y.kind != ElementKind::f32 || p.out.kind != ElementKind::f32)
      internal(direction, "an f32 operand mixed with integer ones");
  } else {
    if (p.y.kind != ElementKind::flex16) internal(direction, "a second operand that is not flex16");
    const bool flex_out = p.out.kind == ElementKind::flex16;
    if ((p.epilogue.out_kind == portable::GemmOutKind::flex16) != flex_out)
      internal(direction, "an epilogue for another output type");
  }
}

Args args_of(const ConvProblem& p) {
  Args a{};
  a.g = p.g;
  a.x = p.x;
  a.y = p.y;
  a.out = p.out;
  a.epilogue = p.epilogue;
  a.measure = p.mode == gemm::EpilogueMode::measure;
  a.alpha = p.alpha;
  a.beta = p.beta;
  return a;
}

// Queues `launch(args, stream, record)`; for integer products around it the statistics record
// (`record`; null for f32), then its publication, unless the launch's kernel published it.
template <typename Launch>
gemm::ExactStats run(const ConvProblem& p, const char* direction, int device, void* stream,
                     Launch launch) {
  check_problem(p, direction);
  backend::cuda::DeviceGuard guard(device);
  const auto s = static_cast<cudaStream_t>(stream);
  Args a = args_of(p);
  if (p.x.kind == ElementKind::f32) {
    launch(a, s, nullptr);
    return gemm::known_stats(portable::gemm_stats_identity());
  }
  backend::cuda::DeviceStatsRecord stats(device, s);
  a.stats = stats.device_record();
  launch(a, s, &stats);
  return stats.finish(p.mode == gemm::EpilogueMode::measure);
}

template <typename TI, typename TF, typename Acc>
void launch_fprop(const Args& a, cudaStream_t s, int device) {
  const Geometry& g = a.g;
  const std::int64_t total = g.K * g.out[0] * g.out[1] * g.out[2] * g.N;
  fprop_kernel<TI, TF, Acc><<<grid_for_items(total, device), kThreads, 0, s>>>(a);
  FLEXKIT_CUDA_CHECK_LAUNCH("conv fprop_kernel");
}

template <typename T, typename Acc>
void launch_bprop(const Args& a, cudaStream_t s, int device) {
  const Geometry& g = a.g;
  const std::int64_t total = g.C * g.in[0] * g.in[1] * g.in[2] * g.N;
  bprop_kernel<T, Acc><<<grid_for_items(total, device), kThreads, 0, s>>>(a);
  FLEXKIT_CUDA_CHECK_LAUNCH("conv bprop_kernel");
}

// The slices depend on the geometry alone, so an f32 update sums in the same order on any
// device.
template <typename TI, typename TE, typename Acc>
void launch_update(Args a, cudaStream_t s, int device) {
  const Geometry& g = a.g;
  const std::int64_t elements = g.C * g.flt[0] * g.flt[1] * g.flt[2] * g.K;
  const DirectUpdateSlices slices = direct_update_slices(g, sizeof(Acc));
  a.slice_terms = slices.slice_terms;
  a.slices = slices.slices;
  backend::cuda::Scratch partials(device, slices.partials_bytes);
  a.partials = partials.get();
  update_partials_kernel<TI, TE, Acc><<<grid_for(elements * a.slices, device), kThreads, 0, s>>>(a);
  FLEXKIT_CUDA_CHECK_LAUNCH("conv update_partials_kernel");
  update_finish_kernel<Acc><<<grid_for_items(elements, device), kThreads, 0, s>>>(a);
  FLEXKIT_CUDA_CHECK_LAUNCH("conv update_finish_kernel");
}

using StatsRecord = backend::cuda::DeviceStatsRecord;

// The plan of `p` in `direction`; true when it runs on the tensor cores (then queued).
bool ran_implicit(ImplicitDirection direction, const ConvProblem& p, int device, cudaStream_t s,
                  StatsRecord* record) {
  const ConvCudaPlan& plan = conv_cuda_plan(direction, p, device);
  if (plan.kernel == ConvCudaKernel::direct) return false;
  run_implicit_gemm(plan, direction, p, device, s, *record);
  return true;
}

}  // namespace

DirectUpdateSlices direct_update_slices(const Geometry& g, std::size_t accumulator_bytes) {
  const std::int64_t elements = g.C * g.flt[0] * g.flt[1] * g.flt[2] * g.K;
  const std::int64_t terms = g.out[0] * g.out[1] * g.out[2] * g.N;
  const std::int64_t most_slices = std::max<std::int64_t>(1, kMaxPartials / elements);
  DirectUpdateSlices d;
  d.slice_terms = std::max(kSliceTerms, ceil_div(terms, most_slices));
  d.slices = ceil_div(terms, d.slice_terms);
  d.partials_bytes = static_cast<std::size_t>(elements * d.slices) * accumulator_bytes;
  return d;
}

const backend::HeavyOpPlan& cuda_plan(ConvDirection direction, const ConvProblem& p, int device) {
  if (direction == ConvDirection::bprop && p.x.kind == ElementKind::u8)
    internal("bprop", "a u8 filter");
  const ImplicitDirection d = direction == ConvDirection::fprop   ? ImplicitDirection::fprop
                              : direction == ConvDirection::bprop ? ImplicitDirection::bprop
                                                                  : ImplicitDirection::update;
  return conv_cuda_plan(d, p, device);
}

gemm::ExactStats fprop_cuda(const ConvProblem& p, int device, void* stream) {
  return run(p, "fprop", device, stream, [&](const Args& a, cudaStream_t s, StatsRecord* record) {
    if (ran_implicit(ImplicitDirection::fprop, p, device, s, record)) return;
    switch (p.x.kind) {
      case ElementKind::f32:
        return launch_fprop<float, float, float>(a, s, device);
      case ElementKind::flex16:
        return launch_fprop<std::int16_t, std::int16_t, std::int64_t>(a, s, device);
      case ElementKind::u8:
        return launch_fprop<std::uint8_t, std::int16_t, std::int64_t>(a, s, device);
    }
  });
}

gemm::ExactStats bprop_cuda(const ConvProblem& p, int device, void* stream) {
  if (p.x.kind == ElementKind::u8) internal("bprop", "a u8 filter");
  return run(p, "bprop", device, stream, [&](const Args& a, cudaStream_t s, StatsRecord* record) {
    if (ran_implicit(ImplicitDirection::bprop, p, device, s, record)) return;
    if (p.x.kind == ElementKind::f32) return launch_bprop<float, float>(a, s, device);
    return launch_bprop<std::int16_t, std::int64_t>(a, s, device);
  });
}

gemm::ExactStats update_cuda(const ConvProblem& p, int device, void* stream) {
  return run(p, "update", device, stream, [&](const Args& a, cudaStream_t s, StatsRecord* record) {
    if (ran_implicit(ImplicitDirection::update, p, device, s, record)) return;
    switch (p.x.kind) {
      case ElementKind::f32:
        return launch_update<float, float, float>(a, s, device);
      case ElementKind::flex16:
        return launch_update<std::int16_t, std::int16_t, std::int64_t>(a, s, device);
      case ElementKind::u8:
        return launch_update<std::uint8_t, std::int16_t, std::int64_t>(a, s, device);
    }
  });
}

}  // namespace flexkit::conv
