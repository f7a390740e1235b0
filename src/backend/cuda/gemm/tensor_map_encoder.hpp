// The driver's cuTensorMapEncodeTiled, looked up once through the runtime (flexkit links only
// the runtime library): what every kernel that loads through TMA encodes its maps with.
#pragma once
#include <cuda.h>
#include <cudaTypedefs.h>

namespace flexkit::backend::cuda::gemm_kernels {

// Throws CudaError where the driver has no such entry point (older than CUDA 12).
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder();

}  // namespace flexkit::backend::cuda::gemm_kernels
