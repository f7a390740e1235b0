// Device memory that holds zeros between the calls that use it: a kernel adds its partial sums
// into it, and the call's finishing pass reads the totals and writes the zeros back. So a call
// needs no memset before its kernel.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

namespace flexkit::backend::cuda {

// At least `bytes` of zeros for kernels queued on `stream` of `device`, one buffer per stream
// (so that stream order keeps its users apart), grown as asked. Every call that uses it must
// leave it all zeros when its last kernel completes.
void* zeroed_workspace(int device, cudaStream_t stream, std::size_t bytes);

}  // namespace flexkit::backend::cuda
