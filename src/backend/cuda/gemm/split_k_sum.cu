#include "backend/cuda/check.hpp"
#include "backend/cuda/gemm/split_k_sum.hpp"

namespace flexkit::backend::cuda {
namespace {

__global__ void split_k_sum_kernel(const float* __restrict__ partials, std::int64_t parts,
                                   std::int64_t m, std::int64_t n, float* out,
                                   std::int64_t row_stride, std::int64_t col_stride, float alpha,
                                   float beta) {
  const std::int64_t count = m * n;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float acc = 0.0f;
    for (std::int64_t s = 0; s < parts; ++s) acc += partials[s * count + i];
    float* o = out + (i / n) * row_stride + (i % n) * col_stride;
    *o = beta == 0.0f ? __fmul_rn(alpha, acc)
                      : __fadd_rn(__fmul_rn(alpha, acc), __fmul_rn(beta, *o));
  }
}

}  // namespace

void split_k_sum(const float* partials, std::int64_t parts, std::int64_t m, std::int64_t n,
                 float* out, std::int64_t row_stride, std::int64_t col_stride, float alpha,
                 float beta, int multiprocessors, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const std::int64_t count = m * n;
  const std::int64_t blocks =
      std::min<std::int64_t>((count + kThreads - 1) / kThreads, std::int64_t{8} * multiprocessors);
  split_k_sum_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      partials, parts, m, n, out, row_stride, col_stride, alpha, beta);
  FLEXKIT_CUDA_CHECK_LAUNCH("split_k_sum");
}

}  // namespace flexkit::backend::cuda
