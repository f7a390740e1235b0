// AVX-512 microkernels: vpdpwssd (VNNI) for the exact integer products, vfmadd for f32. Compiled
// with per-function target attributes (not per-file flags), so nothing else in this file, and
// no inline function shared with other files, is built for AVX-512: the driver calls these only
// after checking the CPU (gemm_isa()).
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backend/cpu/gemm/gemm_kernels.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's intrinsics seed their results with `__m512i __Y = __Y;` (an "undefined" vector); once
// inlined into target-attributed functions that trips -W(maybe-)uninitialized, which -Werror
// would turn into errors. The warning is about the compiler's own headers, not this file.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#define FLEXKIT_GEMM_AVX512 1
#define FLEXKIT_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))
#else
#define FLEXKIT_GEMM_AVX512 0
#endif

namespace flexkit::backend::cpu::gemm_detail {

#if FLEXKIT_GEMM_AVX512
namespace {

// MR rows × NV·16 columns, P planes: MR·NV·P int32 accumulators (24 of the 32 zmm registers
// for the shapes used below), NV·P B vectors and one A broadcast per row. The sums go to memory
// (see IntPlanesFn for the layout): that keeps GCC's register allocator from spilling
// accumulators inside the k loop.
template <int MR, int NV, int P>
FLEXKIT_TARGET_AVX512 void int_planes(std::int64_t pairs, const std::int16_t* a,
                                      const std::int16_t* b, std::int32_t* sums) {
  constexpr int NR = NV * 16;
  // Flat arrays: GCC keeps them in registers, but spills [P][MR][NV] ones in the k loop.
  __m512i acc[P * MR * NV];
#pragma GCC unroll 64
  for (int q = 0; q < P; ++q)
#pragma GCC unroll 64
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 64
      for (int v = 0; v < NV; ++v) acc[(q * MR + r) * NV + v] = _mm512_setzero_si512();
  for (std::int64_t p = 0; p < pairs; ++p) {
    const std::int16_t* bp = b + p * P * NR * 2;
    const std::int16_t* ap = a + p * MR * 2;
    __m512i bv[P * NV];
#pragma GCC unroll 64
    for (int q = 0; q < P; ++q)
#pragma GCC unroll 64
      for (int v = 0; v < NV; ++v) bv[q * NV + v] = _mm512_loadu_si512(bp + (q * NR + v * 16) * 2);
#pragma GCC unroll 64
    for (int r = 0; r < MR; ++r) {
      std::int32_t pair;
      std::memcpy(&pair, ap + 2 * r, sizeof pair);
      const __m512i av = _mm512_set1_epi32(pair);
#pragma GCC unroll 64
      for (int q = 0; q < P; ++q)
#pragma GCC unroll 64
        for (int v = 0; v < NV; ++v)
          acc[(q * MR + r) * NV + v] =
              _mm512_dpwssd_epi32(acc[(q * MR + r) * NV + v], av, bv[q * NV + v]);
    }
  }
#pragma GCC unroll 64
  for (int i = 0; i < P * MR * NV; ++i) _mm512_storeu_si512(sums + i * 16, acc[i]);
}

// int_planes, then the int64 tile (+)= 256·H + L (two planes) or the one plane's sum.
template <int MR, int NV, int P>
FLEXKIT_TARGET_AVX512 void int_kernel(std::int64_t pairs, const std::int16_t* a,
                                      const std::int16_t* b, std::int64_t* tile, std::int64_t ldc,
                                      bool accumulate) {
  constexpr int NR = NV * 16;
  alignas(64) std::int32_t sums[P * MR * NV * 16];
  int_planes<MR, NV, P>(pairs, a, b, sums);
  for (int r = 0; r < MR; ++r) {
    for (int half = 0; half < 2 * NV; ++half) {
      const std::int32_t* h = sums + r * NR + half * 8;
      __m512i sum = _mm512_cvtepi32_epi64(_mm256_load_si256(reinterpret_cast<const __m256i*>(h)));
      if constexpr (P == 2) {
        const __m512i l =
            _mm512_cvtepi32_epi64(_mm256_load_si256(reinterpret_cast<const __m256i*>(h + MR * NR)));
        sum = _mm512_add_epi64(_mm512_slli_epi64(sum, 8), l);
      }
      std::int64_t* out = tile + r * ldc + half * 8;
      if (accumulate) sum = _mm512_add_epi64(sum, _mm512_loadu_si512(out));
      _mm512_storeu_si512(out, sum);
    }
  }
}

// MR rows × NV·16 columns of f32, MR·NV accumulators. The set below uses 6 × 64: per k, 4 B
// vectors and 6 broadcasts feed 24 FMAs (12 × 32 took 2 and 12 for the same 24, and measured
// 4–14 % slower on the development machine's AVX-512 cores; the one-plane u8 integer kernel
// likewise).
template <int MR, int NV>
FLEXKIT_TARGET_AVX512 void f32_kernel(std::int64_t k, const float* a, const float* b, float* tile,
                                      std::int64_t ldc, bool accumulate) {
  constexpr int NR = NV * 16;
  __m512 acc[MR * NV];
#pragma GCC unroll 64
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 64
    for (int v = 0; v < NV; ++v)
      acc[r * NV + v] = accumulate ? _mm512_loadu_ps(tile + r * ldc + v * 16) : _mm512_setzero_ps();
  for (std::int64_t p = 0; p < k; ++p) {
    __m512 bv[NV];
#pragma GCC unroll 64
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(b + p * NR + v * 16);
#pragma GCC unroll 64
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(a[p * MR + r]);
#pragma GCC unroll 64
      for (int v = 0; v < NV; ++v) acc[r * NV + v] = _mm512_fmadd_ps(av, bv[v], acc[r * NV + v]);
    }
  }
#pragma GCC unroll 64
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 64
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(tile + r * ldc + v * 16, acc[r * NV + v]);
}

// The transposing packs (F32PackFn). Each turns 16 k values of up to 16 rows (A) or columns
// (B), loaded as vectors along k, into vectors along the rows or columns.
//
// 64-bit interleaves of float vectors (functions, not lambdas: a lambda would not inherit the
// target attribute).
FLEXKIT_TARGET_AVX512 __m512 unpacklo_64(__m512 a, __m512 b) {
  return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
}
FLEXKIT_TARGET_AVX512 __m512 unpackhi_64(__m512 a, __m512 b) {
  return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
}
// A 4 × 4 transpose inside every 128-bit lane of v0 … v3: afterwards lane L of vj holds
// element 4L + j of the four inputs, in input order.
FLEXKIT_TARGET_AVX512 void transpose_4x4_lanes(__m512& v0, __m512& v1, __m512& v2, __m512& v3) {
  const __m512 t0 = _mm512_unpacklo_ps(v0, v1), t1 = _mm512_unpackhi_ps(v0, v1);
  const __m512 t2 = _mm512_unpacklo_ps(v2, v3), t3 = _mm512_unpackhi_ps(v2, v3);
  v0 = unpacklo_64(t0, t2);
  v1 = unpackhi_64(t0, t2);
  v2 = unpacklo_64(t1, t3);
  v3 = unpackhi_64(t1, t3);
}

// r[i] lane j ↔ r[j] lane i: 4 × 4 transposes inside the 128-bit lanes of each group of four
// vectors, then a 4 × 4 transpose of the 128-bit lanes across the groups.
FLEXKIT_TARGET_AVX512 void transpose_16x16(__m512 (&r)[16]) {
  for (int g = 0; g < 4; ++g)
    transpose_4x4_lanes(r[4 * g], r[4 * g + 1], r[4 * g + 2], r[4 * g + 3]);
  // r[4g + j] lane L: rows 4g … 4g + 3 of column 4L + j.
  __m512 out[16];
  for (int j = 0; j < 4; ++j) {
    const __m512 s0 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x44);       // g0.0 g0.1 g1.0 g1.1
    const __m512 s1 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xEE);       // g0.2 g0.3 g1.2 g1.3
    const __m512 s2 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x44);  // g2.0 g2.1 g3.0 g3.1
    const __m512 s3 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xEE);  // g2.2 g2.3 g3.2 g3.3
    out[j] = _mm512_shuffle_f32x4(s0, s2, 0x88);       // lane 0 of each group: column j
    out[4 + j] = _mm512_shuffle_f32x4(s0, s2, 0xDD);   // column 4 + j
    out[8 + j] = _mm512_shuffle_f32x4(s1, s3, 0x88);   // column 8 + j
    out[12 + j] = _mm512_shuffle_f32x4(s1, s3, 0xDD);  // column 12 + j
  }
  for (int i = 0; i < 16; ++i) r[i] = out[i];
}

// pack_a_f32 for MR = 6 and rows contiguous along k: per 16 k values, six row vectors (two zero
// rows beside them) are transposed in 4 × 4 blocks, and each k's six floats are one masked store.
FLEXKIT_TARGET_AVX512 void pack_a_f32_avx512(StridedBlock<float> a, std::int64_t rows,
                                             std::int64_t kv, int mr, float* dst) {
  if (a.cs != 1 || mr != 6) return pack_a_f32(a, rows, kv, mr, dst);
  const std::int64_t panel_size = kv * 6;
  for (std::int64_t r0 = 0; r0 < rows; r0 += 6) {
    float* panel = dst + (r0 / 6) * panel_size;
    const std::int64_t mv = std::min<std::int64_t>(6, rows - r0);
    for (std::int64_t k0 = 0; k0 < kv; k0 += 16) {
      const int kb = static_cast<int>(std::min<std::int64_t>(16, kv - k0));
      const __mmask16 k_mask = static_cast<__mmask16>((1u << kb) - 1u);
      __m512 v[8];
      for (int t = 0; t < 8; ++t)
        v[t] = t < mv ? _mm512_maskz_loadu_ps(k_mask, a.base + (r0 + t) * a.rs + k0)
                      : _mm512_setzero_ps();
      transpose_4x4_lanes(v[0], v[1], v[2], v[3]);  // v[j] lane L: rows 0-3 at k 4L + j
      transpose_4x4_lanes(v[4], v[5], v[6], v[7]);  // rows 4-7
      for (int j = 0; j < 4; ++j) {
        // [rows 0-3, rows 4-7] at k = j and 4 + j, then at 8 + j and 12 + j.
        const __m512 lo = _mm512_shuffle_f32x4(v[j], v[4 + j], 0x44);
        const __m512 hi = _mm512_shuffle_f32x4(v[j], v[4 + j], 0xEE);
        const __m512 k01 = _mm512_shuffle_f32x4(lo, lo, 0xD8);
        const __m512 k23 = _mm512_shuffle_f32x4(hi, hi, 0xD8);
        const __m256 at[4] = {_mm512_castps512_ps256(k01), _mm512_extractf32x8_ps(k01, 1),
                              _mm512_castps512_ps256(k23), _mm512_extractf32x8_ps(k23, 1)};
        for (int q = 0; q < 4; ++q) {
          const int k = 4 * q + j;
          if (k < kb) _mm256_mask_storeu_ps(panel + (k0 + k) * 6, 0x3f, at[q]);
        }
      }
    }
  }
}

// pack_b_f32 for NR = 64 and columns contiguous along k: per 16 k values, each group of 16
// columns is loaded as 16 vectors along k and transposed into 16 vectors along the columns.
FLEXKIT_TARGET_AVX512 void pack_b_f32_avx512(StridedBlock<float> b, std::int64_t kv,
                                             std::int64_t cols, int nr, float* dst) {
  if (b.rs != 1 || b.cs == 1 || nr != 64) return pack_b_f32(b, kv, cols, nr, dst);
  const std::int64_t panel_size = kv * 64;
  for (std::int64_t j0 = 0; j0 < cols; j0 += 64) {
    float* panel = dst + (j0 / 64) * panel_size;
    for (std::int64_t k0 = 0; k0 < kv; k0 += 16) {
      const int kb = static_cast<int>(std::min<std::int64_t>(16, kv - k0));
      const __mmask16 k_mask = static_cast<__mmask16>((1u << kb) - 1u);
      for (int g = 0; g < 4; ++g) {
        __m512 v[16];
        for (int t = 0; t < 16; ++t) {
          const std::int64_t j = j0 + 16 * g + t;
          v[t] = j < cols ? _mm512_maskz_loadu_ps(k_mask, b.base + j * b.cs + k0)
                          : _mm512_setzero_ps();
        }
        transpose_16x16(v);
        for (int k = 0; k < kb; ++k) _mm512_storeu_ps(panel + (k0 + k) * 64 + 16 * g, v[k]);
      }
    }
  }
}

// pack_b_int for a flex16 B with NR = 32 and columns contiguous along k: per 32 k values (16
// pairs), each group of 16 columns is loaded as 16 vectors of pair words, transposed into one
// vector of 16 columns per pair, and split into the high plane (arithmetic >> 8 of each int16)
// and the low one (& 255).
FLEXKIT_TARGET_AVX512 void pack_b_int_avx512(StridedBlock<std::int16_t> b, std::int64_t kv,
                                             std::int64_t cols, int nr, std::int16_t* dst) {
  if (b.rs != 1 || b.cs == 1 || nr != 32) return pack_b_int(b, kv, cols, nr, dst);
  const std::int64_t panel_size = (kv + 1) / 2 * 128;  // per pair: two planes of 32 pair words
  const __m512i low_byte = _mm512_set1_epi16(0xff);
  for (std::int64_t j0 = 0; j0 < cols; j0 += 32) {
    std::int16_t* panel = dst + (j0 / 32) * panel_size;
    for (std::int64_t k0 = 0; k0 < kv; k0 += 32) {
      const int kb = static_cast<int>(std::min<std::int64_t>(32, kv - k0));
      const __mmask32 k_mask = kb == 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << kb) - 1u);
      for (int g = 0; g < 2; ++g) {
        __m512 v[16];
        for (int t = 0; t < 16; ++t) {
          const std::int64_t j = j0 + 16 * g + t;
          v[t] = j < cols
                     ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(k_mask, b.base + j * b.cs + k0))
                     : _mm512_setzero_ps();
        }
        transpose_16x16(v);  // v[p] lane t: column 16g + t, pair k0 / 2 + p
        for (int p = 0; p < (kb + 1) / 2; ++p) {
          const __m512i w = _mm512_castps_si512(v[p]);
          std::int16_t* const at = panel + (k0 / 2 + p) * 128 + 32 * g;
          _mm512_storeu_si512(at, _mm512_srai_epi16(w, 8));
          _mm512_storeu_si512(at + 64, _mm512_and_si512(w, low_byte));
        }
      }
    }
  }
}

// See RoundRowFn. The rounding is portable::gemm_round_shift_right, the branch-free form of
// gemm_round_shift for 1 ≤ s ≤ 62 and |acc| < 2^62 (every exact sum of fewer than 2^32 int16
// products), eight lanes at a time: q = (acc + 2^(s−1) − 1 + (floor(acc / 2^s) mod 2)) >> s,
// then the saturating narrowing to int16; lanes past nv load as 0 and round to 0, which changes
// neither statistic.
FLEXKIT_TARGET_AVX512 RowStats round_row(const portable::GemmEpilogue& e, const std::int64_t* acc,
                                         int nv, std::int16_t* m) {
  const int s = e.scale;
  const __m128i count = _mm_cvtsi32_si128(s);
  const __m512i bias = _mm512_set1_epi64((std::int64_t{1} << (s - 1)) - 1);
  const __m512i one = _mm512_set1_epi64(1);
  const __m512i max_m = _mm512_set1_epi64(portable::kFlex16MaxM);
  const __m512i min_m = _mm512_set1_epi64(portable::kFlex16MinM);
  __m512i max_abs = _mm512_setzero_si512();
  int saturated = 0;
  for (int j = 0; j < nv; j += 8) {
    const __mmask8 lanes = nv - j >= 8 ? __mmask8(0xff) : __mmask8((1u << (nv - j)) - 1u);
    const __m512i a = _mm512_maskz_loadu_epi64(lanes, acc + j);
    const __m512i odd = _mm512_and_si512(_mm512_sra_epi64(a, count), one);
    const __m512i q = _mm512_sra_epi64(_mm512_add_epi64(_mm512_add_epi64(a, bias), odd), count);
    const __mmask8 out = _mm512_cmpgt_epi64_mask(q, max_m) | _mm512_cmplt_epi64_mask(q, min_m);
    saturated += __builtin_popcount(out);
    const __m512i v = _mm512_min_epi64(_mm512_max_epi64(q, min_m), max_m);
    max_abs = _mm512_max_epi64(max_abs, _mm512_abs_epi64(v));
    // Narrowed in registers, then stored: the memory form of vpmovqw is several times slower.
    _mm_mask_storeu_epi16(m + j, lanes, _mm512_cvtepi64_epi16(v));
  }
  return {static_cast<std::int32_t>(_mm512_reduce_max_epi64(max_abs)), saturated};
}

// See RoundPlanesRowFn: sixteen int32 lanes at a time; lanes past nv load as 0 and round to 0.
FLEXKIT_TARGET_AVX512 RowStats round_planes_row(const portable::GemmEpilogue& e,
                                                const std::int32_t* h, const std::int32_t* l,
                                                int nv, std::int16_t* m) {
  const int s = e.scale;
  const __m512i max_m = _mm512_set1_epi32(portable::kFlex16MaxM);
  const __m512i min_m = _mm512_set1_epi32(portable::kFlex16MinM);
  const __m512i zero = _mm512_setzero_si512();
  __m512i max_abs = zero;
  int saturated = 0;
  for (int j = 0; j < nv; j += 16) {
    const __mmask16 lanes = nv - j >= 16 ? __mmask16(0xffff) : __mmask16((1u << (nv - j)) - 1u);
    const __m512i hv = _mm512_maskz_loadu_epi32(lanes, h + j);
    __m512i q;
    if (l != nullptr) {
      // y = h + (l >> 8) + 2^(s−9); q = y >> (s − 8), cleared to even where the sum was a tie:
      // l mod 256 = 0 and y mod 2^(s−8) = 0 (see planes_round_fits).
      const __m512i lv = _mm512_maskz_loadu_epi32(lanes, l + j);
      const __m512i y = _mm512_add_epi32(_mm512_add_epi32(hv, _mm512_srai_epi32(lv, 8)),
                                         _mm512_set1_epi32(std::int32_t{1} << (s - 9)));
      q = _mm512_sra_epi32(y, _mm_cvtsi32_si128(s - 8));
      const __mmask16 tie =
          _mm512_testn_epi32_mask(lv, _mm512_set1_epi32(255)) &
          _mm512_testn_epi32_mask(y, _mm512_set1_epi32(std::int32_t((1u << (s - 8)) - 1u)));
      q = _mm512_mask_and_epi32(q, tie, q, _mm512_set1_epi32(~1));
    } else {
      // gemm_round_int32: q0 + ((acc mod 2^s) + 2^(s−1) − 1 + q0 mod 2) >> s, unsigned.
      const __m128i count = _mm_cvtsi32_si128(s);
      const __m512i q0 = _mm512_sra_epi32(hv, count);
      const __m512i rem = _mm512_and_si512(hv, _mm512_set1_epi32(std::int32_t((1u << s) - 1u)));
      const __m512i up = _mm512_add_epi32(
          _mm512_add_epi32(rem, _mm512_set1_epi32(std::int32_t((1u << (s - 1)) - 1u))),
          _mm512_and_si512(q0, _mm512_set1_epi32(1)));
      q = _mm512_add_epi32(q0, _mm512_srl_epi32(up, count));
    }
    const __mmask16 out = _mm512_cmpgt_epi32_mask(q, max_m) | _mm512_cmplt_epi32_mask(q, min_m);
    saturated += __builtin_popcount(out);
    const __m512i v = _mm512_min_epi32(_mm512_max_epi32(q, min_m), max_m);
    max_abs = _mm512_max_epi32(max_abs, _mm512_abs_epi32(v));
    _mm256_mask_storeu_epi16(m + j, lanes, _mm512_cvtepi32_epi16(v));
  }
  return {_mm512_reduce_max_epi32(max_abs), saturated};
}

}  // namespace

KernelSet avx512_kernels() {
  KernelSet s;
  s.u8 = {6, 64, 1, &int_kernel<6, 4, 1>, &int_planes<6, 4, 1>};
  s.flex16 = {
      6, 32, 2, &int_kernel<6, 2, 2>, &int_planes<6, 2, 2>, &pack_a_int, &pack_b_int_avx512};
  s.f32 = {6, 64, &f32_kernel<6, 4>, &pack_a_f32_avx512, &pack_b_f32_avx512};
  s.round_row = &round_row;
  s.round_planes_row = &round_planes_row;
  return s;
}
#else
KernelSet avx512_kernels() {
  return scalar_kernels();
}
#endif

}  // namespace flexkit::backend::cpu::gemm_detail
