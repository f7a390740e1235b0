// The finishing step of an f32 product split along k: out = alpha · Σ partials + beta · out, the
// partials summed in index order (so a run repeats bit for bit).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace flexkit::backend::cuda {

// partials: `parts` row-major m × n matrices, one after the other. out: element (r, c) at
// out + r·row_stride + c·col_stride. beta == 0: out is not read.
void split_k_sum(const float* partials, std::int64_t parts, std::int64_t m, std::int64_t n,
                 float* out, std::int64_t row_stride, std::int64_t col_stride, float alpha,
                 float beta, int multiprocessors, cudaStream_t stream);

}  // namespace flexkit::backend::cuda
