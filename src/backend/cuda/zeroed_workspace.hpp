// Device memory that holds zeros between the kernels that use it: a kernel adds its partial sums
// into it, and the last of its CTAs to finish a tile reads the totals and writes the zeros back.
// So a call needs no memset before its kernel, and the workspace no finishing pass after it.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

namespace flexkit::backend::cuda {

// At least `bytes` of zeros for kernels queued on `stream` of `device`, one buffer per stream
// (so that stream order keeps its users apart), grown as asked. Every kernel that uses it must
// leave it all zeros when it completes.
void* zeroed_workspace(int device, cudaStream_t stream, std::size_t bytes);

}  // namespace flexkit::backend::cuda
