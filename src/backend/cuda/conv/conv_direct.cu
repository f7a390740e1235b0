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
#include "backend/cuda/conv/conv_direct_common.cuh"
#include "backend/cuda/conv/conv_implicit_gemm.hpp"
#include "backend/cuda/conv/conv_small_reduction.cuh"
#include "backend/cuda/exact_stats_commit.cuh"
#include "backend/cuda/launch_support.hpp"
#include "backend/cuda/pending_stats.hpp"
#include "core/text.hpp"
#include "flexkit/error.hpp"
#include "flexkit/portable/gemm_epilogue.hpp"

namespace flexkit::conv {
namespace {

using namespace direct;
using gemm::ElementKind;
using portable::GemmStats;

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
// ---- host side -------------------------------------------------------------------------------

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

// The plan of `p` in `direction`; true when it runs on the tensor cores or the small-reduction
// kernels (then queued), false for the direct kernels.
bool ran_planned(ImplicitDirection direction, const ConvProblem& p, const Args& a, int device,
                 cudaStream_t s, StatsRecord* record) {
  const ConvCudaPlan& plan = conv_cuda_plan(direction, p, device);
  if (plan.kernel == ConvCudaKernel::direct) return false;
  if (plan.kernel == ConvCudaKernel::small_reduction) {
    run_small_reduction(direction, a, s, device);
    return true;
  }
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
    if (ran_planned(ImplicitDirection::fprop, p, a, device, s, record)) return;
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
    if (ran_planned(ImplicitDirection::bprop, p, a, device, s, record)) return;
    if (p.x.kind == ElementKind::f32) return launch_bprop<float, float>(a, s, device);
    return launch_bprop<std::int16_t, std::int64_t>(a, s, device);
  });
}

gemm::ExactStats update_cuda(const ConvProblem& p, int device, void* stream) {
  return run(p, "update", device, stream, [&](const Args& a, cudaStream_t s, StatsRecord* record) {
    if (ran_planned(ImplicitDirection::update, p, a, device, s, record)) return;
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
