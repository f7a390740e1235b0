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
// NV·P B vectors, one broadcast and one product temporary). The sums go to memory (IntPlanesFn's
// layout), as in kernels_avx512.cpp.
template <int MR, int NV, int P>
FLEXKIT_TARGET_AVX2 void int_planes(std::int64_t pairs, const std::int16_t* a,
                                    const std::int16_t* b, std::int32_t* sums) {
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
#pragma GCC unroll 64
  for (int i = 0; i < P * MR * NV; ++i)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(sums + i * 8), acc[i]);
}

// int_planes, then the int64 tile (+)= 256·H + L (two planes) or the one plane's sum.
template <int MR, int NV, int P>
FLEXKIT_TARGET_AVX2 void int_kernel(std::int64_t pairs, const std::int16_t* a,
                                    const std::int16_t* b, std::int64_t* tile, std::int64_t ldc,
                                    bool accumulate) {
  constexpr int NR = NV * 8;
  alignas(32) std::int32_t sums[P * MR * NV * 8];
  int_planes<MR, NV, P>(pairs, a, b, sums);
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

// See RoundRowFn: portable::gemm_round_shift_right four int64 lanes at a time, as in
// kernels_avx512.cpp. AVX2 has no 64-bit arithmetic shift, min or max: the shift is the logical
// one with the sign's ones shifted in from the top, the clamps are compares and blends.
FLEXKIT_TARGET_AVX2 __m256i sra_epi64(__m256i x, __m128i count, __m128i complement) {
  const __m256i sign = _mm256_cmpgt_epi64(_mm256_setzero_si256(), x);
  return _mm256_or_si256(_mm256_srl_epi64(x, count), _mm256_sll_epi64(sign, complement));
}

FLEXKIT_TARGET_AVX2 RowStats round_row(const portable::GemmEpilogue& e, const std::int64_t* acc,
                                       int nv, std::int16_t* m) {
  const int s = e.scale;
  const __m128i count = _mm_cvtsi32_si128(s), complement = _mm_cvtsi32_si128(64 - s);
  const __m256i bias = _mm256_set1_epi64x((std::int64_t{1} << (s - 1)) - 1);
  const __m256i one = _mm256_set1_epi64x(1);
  const __m256i max_m = _mm256_set1_epi64x(portable::kFlex16MaxM);
  const __m256i min_m = _mm256_set1_epi64x(portable::kFlex16MinM);
  const __m256i lane = _mm256_setr_epi64x(0, 1, 2, 3);
  // Bytes 0-1 of each 64-bit lane to the bottom of its 128-bit half, then the halves joined.
  const __m256i pick = _mm256_setr_epi8(0, 1, 8, 9, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                        0, 1, 8, 9, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  __m128i max_abs = _mm_setzero_si128();
  int saturated = 0;
  for (int j = 0; j < nv; j += 4) {
    const __m256i lanes = _mm256_cmpgt_epi64(_mm256_set1_epi64x(nv - j), lane);
    const __m256i a = _mm256_maskload_epi64(reinterpret_cast<const long long*>(acc + j), lanes);
    const __m256i odd = _mm256_and_si256(_mm256_srl_epi64(a, count), one);
    const __m256i q =
        sra_epi64(_mm256_add_epi64(_mm256_add_epi64(a, bias), odd), count, complement);
    const __m256i over = _mm256_cmpgt_epi64(q, max_m), under = _mm256_cmpgt_epi64(min_m, q);
    saturated +=
        __builtin_popcount(_mm256_movemask_pd(_mm256_castsi256_pd(_mm256_or_si256(over, under))));
    const __m256i v = _mm256_blendv_epi8(_mm256_blendv_epi8(q, max_m, over), min_m, under);
    const __m256i picked = _mm256_shuffle_epi8(v, pick);
    const __m128i packed =
        _mm_unpacklo_epi32(_mm256_castsi256_si128(picked), _mm256_extracti128_si256(picked, 1));
    // |−32768| is 0x8000 as an unsigned 16-bit value.
    max_abs = _mm_max_epu16(max_abs, _mm_abs_epi16(packed));
    alignas(16) std::int16_t four[8];
    _mm_store_si128(reinterpret_cast<__m128i*>(four), packed);
    std::memcpy(m + j, four, sizeof(std::int16_t) * static_cast<std::size_t>(std::min(4, nv - j)));
  }
  alignas(16) std::uint16_t lanes_max[8];
  _mm_store_si128(reinterpret_cast<__m128i*>(lanes_max), max_abs);
  return {static_cast<std::int32_t>(*std::max_element(lanes_max, lanes_max + 4)), saturated};
}

// See RoundPlanesRowFn: eight int32 lanes at a time, the same arithmetic as the AVX-512 one;
// lanes past nv load as 0 and round to 0, and a short row's last vector is stored through a
// small buffer.
FLEXKIT_TARGET_AVX2 RowStats round_planes_row(const portable::GemmEpilogue& e,
                                              const std::int32_t* h, const std::int32_t* l, int nv,
                                              std::int16_t* m) {
  const int s = e.scale;
  const __m256i max_m = _mm256_set1_epi32(portable::kFlex16MaxM);
  const __m256i min_m = _mm256_set1_epi32(portable::kFlex16MinM);
  const __m256i zero = _mm256_setzero_si256();
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256i max_abs = zero;
  int saturated = 0;
  for (int j = 0; j < nv; j += 8) {
    const __m256i lanes = _mm256_cmpgt_epi32(_mm256_set1_epi32(nv - j), lane);
    const __m256i hv = _mm256_maskload_epi32(h + j, lanes);
    __m256i q;
    if (l != nullptr) {
      const __m256i lv = _mm256_maskload_epi32(l + j, lanes);
      const __m256i y = _mm256_add_epi32(_mm256_add_epi32(hv, _mm256_srai_epi32(lv, 8)),
                                         _mm256_set1_epi32(std::int32_t{1} << (s - 9)));
      q = _mm256_sra_epi32(y, _mm_cvtsi32_si128(s - 8));
      const __m256i tie = _mm256_and_si256(
          _mm256_cmpeq_epi32(_mm256_and_si256(lv, _mm256_set1_epi32(255)), zero),
          _mm256_cmpeq_epi32(
              _mm256_and_si256(y, _mm256_set1_epi32(std::int32_t((1u << (s - 8)) - 1u))), zero));
      q = _mm256_andnot_si256(_mm256_and_si256(tie, _mm256_set1_epi32(1)), q);
    } else {
      const __m128i count = _mm_cvtsi32_si128(s);
      const __m256i q0 = _mm256_sra_epi32(hv, count);
      const __m256i rem = _mm256_and_si256(hv, _mm256_set1_epi32(std::int32_t((1u << s) - 1u)));
      const __m256i up = _mm256_add_epi32(
          _mm256_add_epi32(rem, _mm256_set1_epi32(std::int32_t((1u << (s - 1)) - 1u))),
          _mm256_and_si256(q0, _mm256_set1_epi32(1)));
      q = _mm256_add_epi32(q0, _mm256_srl_epi32(up, count));
    }
    const __m256i out = _mm256_or_si256(_mm256_cmpgt_epi32(q, max_m), _mm256_cmpgt_epi32(min_m, q));
    saturated += __builtin_popcount(_mm256_movemask_ps(_mm256_castsi256_ps(out)));
    const __m256i v = _mm256_min_epi32(_mm256_max_epi32(q, min_m), max_m);
    max_abs = _mm256_max_epi32(max_abs, _mm256_abs_epi32(v));
    // packs works within 128-bit halves: v0-3 v0-3 v4-7 v4-7, then the two 64-bit runs joined.
    const __m128i packed =
        _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packs_epi32(v, v), 0xd8));
    if (nv - j >= 8) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(m + j), packed);
    } else {
      alignas(16) std::int16_t tail[8];
      _mm_store_si128(reinterpret_cast<__m128i*>(tail), packed);
      std::memcpy(m + j, tail, sizeof(std::int16_t) * static_cast<std::size_t>(nv - j));
    }
  }
  alignas(32) std::int32_t lanes_max[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes_max), max_abs);
  return {*std::max_element(lanes_max, lanes_max + 8), saturated};
}

// The transposing packs (F32PackFn), as in kernels_avx512.cpp with 8 × 8 blocks: each turns 8 k
// values of up to 8 rows (A) or columns (B), loaded as vectors along k, into vectors along the
// rows or columns.
//
// r[i] lane j ↔ r[j] lane i: 32-bit and 64-bit interleaves inside the 128-bit halves (a 4 × 4
// transpose in each), then the halves across vectors four apart.
FLEXKIT_TARGET_AVX2 void transpose_8x8(__m256 (&r)[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int g = 0; g < 2; ++g) {
    // Rows 4g … 4g + 3: u[4g + j] half h holds them at column 4h + j.
    u[4 * g] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
    u[4 * g + 1] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
    u[4 * g + 2] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
    u[4 * g + 3] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
  }
  for (int j = 0; j < 4; ++j) {
    r[j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x20);      // column j: low halves
    r[4 + j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x31);  // column 4 + j: high halves
  }
}

// Lanes 0 … n − 1 on (for maskload / maskstore).
FLEXKIT_TARGET_AVX2 __m256i first_lanes(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// pack_a_f32 for MR = 6 and rows contiguous along k: six row vectors (two zero rows beside them)
// transposed, each k's six floats one masked store.
FLEXKIT_TARGET_AVX2 void pack_a_f32_avx2(StridedBlock<float> a, std::int64_t rows, std::int64_t kv,
                                         int mr, float* dst) {
  if (a.cs != 1 || mr != 6) return pack_a_f32(a, rows, kv, mr, dst);
  const std::int64_t panel_size = kv * 6;
  const __m256i six = first_lanes(6);
  for (std::int64_t r0 = 0; r0 < rows; r0 += 6) {
    float* panel = dst + (r0 / 6) * panel_size;
    const std::int64_t mv = std::min<std::int64_t>(6, rows - r0);
    for (std::int64_t k0 = 0; k0 < kv; k0 += 8) {
      const int kb = static_cast<int>(std::min<std::int64_t>(8, kv - k0));
      const __m256i k_mask = first_lanes(kb);
      __m256 v[8];
      for (int t = 0; t < 8; ++t)
        v[t] = t < mv ? _mm256_maskload_ps(a.base + (r0 + t) * a.rs + k0, k_mask)
                      : _mm256_setzero_ps();
      transpose_8x8(v);
      for (int k = 0; k < kb; ++k) _mm256_maskstore_ps(panel + (k0 + k) * 6, six, v[k]);
    }
  }
}

// pack_b_f32 for NR = 16 and columns contiguous along k: per 8 k values, each half of the panel's
// 16 columns is loaded as 8 vectors along k and transposed.
FLEXKIT_TARGET_AVX2 void pack_b_f32_avx2(StridedBlock<float> b, std::int64_t kv, std::int64_t cols,
                                         int nr, float* dst) {
  if (b.rs != 1 || b.cs == 1 || nr != 16) return pack_b_f32(b, kv, cols, nr, dst);
  const std::int64_t panel_size = kv * 16;
  for (std::int64_t j0 = 0; j0 < cols; j0 += 16) {
    float* panel = dst + (j0 / 16) * panel_size;
    for (std::int64_t k0 = 0; k0 < kv; k0 += 8) {
      const int kb = static_cast<int>(std::min<std::int64_t>(8, kv - k0));
      const __m256i k_mask = first_lanes(kb);
      for (int h = 0; h < 2; ++h) {
        __m256 v[8];
        for (int t = 0; t < 8; ++t) {
          const std::int64_t j = j0 + 8 * h + t;
          v[t] =
              j < cols ? _mm256_maskload_ps(b.base + j * b.cs + k0, k_mask) : _mm256_setzero_ps();
        }
        transpose_8x8(v);
        for (int k = 0; k < kb; ++k) _mm256_storeu_ps(panel + (k0 + k) * 16 + 8 * h, v[k]);
      }
    }
  }
}

}  // namespace

KernelSet avx2_kernels() {
  KernelSet s;
  s.u8 = {6, 16, 1, &int_kernel<6, 2, 1>, &int_planes<6, 2, 1>};
  s.flex16 = {6, 8, 2, &int_kernel<6, 1, 2>, &int_planes<6, 1, 2>};
  s.f32 = {6, 16, &f32_kernel<6, 2>, &pack_a_f32_avx2, &pack_b_f32_avx2};
  s.round_row = &round_row;
  s.round_planes_row = &round_planes_row;
  return s;
}
#else
KernelSet avx2_kernels() {
  return scalar_kernels();
}
#endif

}  // namespace flexkit::backend::cpu::gemm_detail
