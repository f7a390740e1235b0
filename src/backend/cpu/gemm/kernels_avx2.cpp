// AVX2 microkernels: vpmaddwd + vpaddd for the exact integer products (any AVX2 CPU, no VNNI
// needed), vfmadd for f32. Per-function target attributes, as in kernels_avx512.cpp.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backend/cpu/gemm/gemm_kernels.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's intrinsics seed their results with `__m256i __Y = __Y;` (an "undefined" vector); once
// inlined into target-attributed functions that trips -W(maybe-)uninitialized, which -Werror
// would turn into errors. The warning is about the compiler's own headers, not this file.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#define FLEXKIT_GEMM_AVX2 1
#define FLEXKIT_TARGET_AVX2 __attribute__((target("avx2,fma")))
#else
#define FLEXKIT_GEMM_AVX2 0
#endif

namespace flexkit::backend::cpu::gemm_detail {

#if FLEXKIT_GEMM_AVX2
namespace {

// MR rows × NV·8 columns, P planes; sized to the 16 ymm registers (MR·NV·P accumulators,
// NV·P B vectors, one broadcast and one product temporary).
template <int MR, int NV, int P>
FLEXKIT_TARGET_AVX2 void int_kernel(std::int64_t pairs, const std::int16_t* a,
                                    const std::int16_t* b, std::int64_t* tile, std::int64_t ldc,
                                    bool accumulate) {
  constexpr int NR = NV * 8;
  // Flat arrays: GCC keeps them in registers, but spills [P][MR][NV] ones in the k loop.
  __m256i acc[P * MR * NV];
#pragma GCC unroll 64
  for (int q = 0; q < P; ++q)
#pragma GCC unroll 64
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 64
      for (int v = 0; v < NV; ++v) acc[(q * MR + r) * NV + v] = _mm256_setzero_si256();
  for (std::int64_t p = 0; p < pairs; ++p) {
    const std::int16_t* bp = b + p * P * NR * 2;
    const std::int16_t* ap = a + p * MR * 2;
    __m256i bv[P * NV];
#pragma GCC unroll 64
    for (int q = 0; q < P; ++q)
#pragma GCC unroll 64
      for (int v = 0; v < NV; ++v)
        bv[q * NV + v] =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bp + (q * NR + v * 8) * 2));
#pragma GCC unroll 64
    for (int r = 0; r < MR; ++r) {
      std::int32_t pair;
      std::memcpy(&pair, ap + 2 * r, sizeof pair);
      const __m256i av = _mm256_set1_epi32(pair);
#pragma GCC unroll 64
      for (int q = 0; q < P; ++q)
#pragma GCC unroll 64
        for (int v = 0; v < NV; ++v)
          acc[(q * MR + r) * NV + v] =
              _mm256_add_epi32(acc[(q * MR + r) * NV + v], _mm256_madd_epi16(av, bv[q * NV + v]));
    }
  }
  // Widen through memory, as in kernels_avx512.cpp.
  alignas(32) std::int32_t sums[P * MR * NV * 8];
#pragma GCC unroll 64
  for (int i = 0; i < P * MR * NV; ++i)
    _mm256_store_si256(reinterpret_cast<__m256i*>(sums + i * 8), acc[i]);
  for (int r = 0; r < MR; ++r) {
    for (int half = 0; half < 2 * NV; ++half) {
      const std::int32_t* h = sums + r * NR + half * 4;
      __m256i sum = _mm256_cvtepi32_epi64(_mm_load_si128(reinterpret_cast<const __m128i*>(h)));
      if constexpr (P == 2) {
        const __m256i l =
            _mm256_cvtepi32_epi64(_mm_load_si128(reinterpret_cast<const __m128i*>(h + MR * NR)));
        sum = _mm256_add_epi64(_mm256_slli_epi64(sum, 8), l);
      }
      auto* out = reinterpret_cast<__m256i*>(tile + r * ldc + half * 4);
      if (accumulate) sum = _mm256_add_epi64(sum, _mm256_loadu_si256(out));
      _mm256_storeu_si256(out, sum);
    }
  }
}

template <int MR, int NV>
FLEXKIT_TARGET_AVX2 void f32_kernel(std::int64_t k, const float* a, const float* b, float* tile,
                                    std::int64_t ldc, bool accumulate) {
  constexpr int NR = NV * 8;
  __m256 acc[MR * NV];
#pragma GCC unroll 64
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 64
    for (int v = 0; v < NV; ++v)
      acc[r * NV + v] = accumulate ? _mm256_loadu_ps(tile + r * ldc + v * 8) : _mm256_setzero_ps();
  for (std::int64_t p = 0; p < k; ++p) {
    __m256 bv[NV];
#pragma GCC unroll 64
    for (int v = 0; v < NV; ++v) bv[v] = _mm256_loadu_ps(b + p * NR + v * 8);
#pragma GCC unroll 64
    for (int r = 0; r < MR; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + p * MR + r);
#pragma GCC unroll 64
      for (int v = 0; v < NV; ++v) acc[r * NV + v] = _mm256_fmadd_ps(av, bv[v], acc[r * NV + v]);
    }
  }
#pragma GCC unroll 64
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 64
    for (int v = 0; v < NV; ++v) _mm256_storeu_ps(tile + r * ldc + v * 8, acc[r * NV + v]);
}

// See RoundRowFn. Each field is read from its own call (the compiler merges the two) because
// GCC 12 keeps a returned Flex16Code in memory, which stops vectorization, when both fields are
// read from one.
FLEXKIT_TARGET_AVX2 RowStats round_row(const portable::GemmEpilogue& e, const std::int64_t* acc,
                                       int nv, std::int16_t* m) {
  if (!e.integer_only || e.scale <= 0 || e.scale >= 63) __builtin_unreachable();
  const portable::GemmEpilogue el = e;
  std::int32_t max_abs = 0, saturated = 0;
  for (int j = 0; j < nv; ++j) {
    const std::int64_t a = acc[j];
    const std::int32_t v = portable::gemm_flex16_result(el, a, 0).m;
    m[j] = static_cast<std::int16_t>(v);
    max_abs = std::max(max_abs, v < 0 ? -v : v);
    saturated += portable::gemm_flex16_result(el, a, 0).saturated ? 1 : 0;
  }
  return {max_abs, saturated};
}

}  // namespace

KernelSet avx2_kernels() {
  KernelSet s;
  s.u8 = {6, 16, 1, &int_kernel<6, 2, 1>};
  s.flex16 = {6, 8, 2, &int_kernel<6, 1, 2>};
  s.f32 = {6, 16, &f32_kernel<6, 2>};
  s.round_row = &round_row;
  return s;
}
#else
KernelSet avx2_kernels() {
  return scalar_kernels();
}
#endif

}  // namespace flexkit::backend::cpu::gemm_detail
