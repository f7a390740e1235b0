// Host side of every sm_90a-only kernel: whether the loaded image can run, and its shared-memory
// limit raised once.
#pragma once
#include <cuda_runtime.h>

#include "backend/cuda/check.hpp"

namespace flexkit::backend::cuda::gemm_kernels {

// Whether the current device loaded `kernel` as real sm_90a code, and if so, its dynamic
// shared-memory limit raised to `smem_bytes`. ptxVersion is the virtual architecture the loaded
// code came from: 90 for the sm_90a image, 75 when the driver JIT-compiled the compute_75
// fallback (whose body is only a trap): then false, and the caller takes another path.
template <typename Kernel>
bool prepare_sm90_kernel(Kernel kernel, int smem_bytes) {
  cudaFuncAttributes attributes{};
  FLEXKIT_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  if (attributes.binaryVersion != 90 || attributes.ptxVersion < 90) return false;
  FLEXKIT_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  return true;
}

}  // namespace flexkit::backend::cuda::gemm_kernels
