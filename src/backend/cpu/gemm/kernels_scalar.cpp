// Portable microkernels: the reference the SIMD kernels must match bit for bit, and the path on
// CPUs without AVX2. Integer sums go straight to int64 (no int32 stage needed); f32 uses fmaf so
// that its per-element rounding chain is the SIMD kernels' one.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backend/cpu/gemm/gemm_kernels.hpp"

namespace flexkit::backend::cpu::gemm_detail {
namespace {

template <int MR, int NR, int P>
void int_kernel(std::int64_t pairs, const std::int16_t* a, const std::int16_t* b,
                std::int64_t* tile, std::int64_t ldc, bool accumulate) {
  std::int64_t acc[MR][NR] = {};
  for (std::int64_t p = 0; p < pairs; ++p) {
    const std::int16_t* ap = a + p * MR * 2;
    const std::int16_t* bp = b + p * P * NR * 2;
    for (int r = 0; r < MR; ++r) {
      for (int q = 0; q < P; ++q) {
        const std::int64_t weight = (P == 2 && q == 0) ? 256 : 1;
        for (int j = 0; j < NR; ++j) {
          const std::int16_t* bq = bp + (q * NR + j) * 2;
          acc[r][j] +=
              weight * (std::int64_t{ap[2 * r]} * bq[0] + std::int64_t{ap[2 * r + 1]} * bq[1]);
        }
      }
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NR; ++j)
      tile[r * ldc + j] = (accumulate ? tile[r * ldc + j] : 0) + acc[r][j];
}

template <int MR, int NR>
void f32_kernel(std::int64_t k, const float* a, const float* b, float* tile, std::int64_t ldc,
                bool accumulate) {
  float acc[MR][NR];
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NR; ++j) acc[r][j] = accumulate ? tile[r * ldc + j] : 0.0f;
  for (std::int64_t p = 0; p < k; ++p)
    for (int r = 0; r < MR; ++r)
      for (int j = 0; j < NR; ++j) acc[r][j] = std::fmaf(a[p * MR + r], b[p * NR + j], acc[r][j]);
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NR; ++j) tile[r * ldc + j] = acc[r][j];
}

}  // namespace

RowStats round_row_portable(const portable::GemmEpilogue& e, const std::int64_t* acc, int nv,
                            std::int16_t* m) {
  RowStats stats;
  for (int j = 0; j < nv; ++j) {
    const portable::Flex16Code code = portable::gemm_flex16_result(e, acc[j], 0);
    m[j] = code.m;
    stats.max_abs =
        std::max(stats.max_abs, code.m < 0 ? -std::int32_t{code.m} : std::int32_t{code.m});
    stats.saturated += code.saturated ? 1 : 0;
  }
  return stats;
}

KernelSet scalar_kernels() {
  KernelSet s;
  s.u8 = {4, 4, 1, &int_kernel<4, 4, 1>};
  s.flex16 = {4, 4, 2, &int_kernel<4, 4, 2>};
  s.f32 = {4, 4, &f32_kernel<4, 4>, &pack_a_f32, &pack_b_f32};
  s.round_row = &round_row_portable;
  return s;
}

}  // namespace flexkit::backend::cpu::gemm_detail
