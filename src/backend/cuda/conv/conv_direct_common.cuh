// What the direct convolution kernels (conv_direct.cu) and the small-reduction ones
// (conv_small_reduction.cu) share: their arguments, the geometry's index maps, the exact products,
// how an output element is finished through the portable epilogue, and the update's second pass
// (each filter element's slice partials added in slice order, then finished).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/conv_problem.hpp"
#include "backend/cuda/exact_stats_commit.cuh"
#include "backend/cuda/launch_support.hpp"
#include "flexkit/portable/gemm_epilogue.hpp"

namespace flexkit::conv::direct {

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

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

inline unsigned grid_for(std::int64_t blocks, int device) {
  const std::int64_t cap = kBlocksPerSm * backend::cuda::multiprocessors(device);
  return static_cast<unsigned>(std::clamp<std::int64_t>(blocks, 1, cap));
}

inline unsigned grid_for_items(std::int64_t items, int device) {
  return grid_for(ceil_div(items, kThreads), device);
}

}  // namespace flexkit::conv::direct
