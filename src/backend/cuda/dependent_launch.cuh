// Programmatic dependent launch (sm_90): a kernel is launched while the kernel before it in the
// stream still runs, so that its launch does not wait in the stream's gap after it — a finishing
// pass behind the K split or stream-K kernel whose partial sums it adds, or a persistent 1x1
// kernel behind whatever came before it (measured on the H200: 1.6 µs of a 40 µs layer). It waits
// for its prerequisite's completion (and memory) before it touches global memory; the
// prerequisite may let it launch early. On devices before sm_90 both device calls are empty and
// the launch is plain.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "backend/cuda/check.hpp"

namespace flexkit::backend::cuda {

// In the dependent kernel, before it touches anything its prerequisite writes: returns once the
// prerequisite grid has completed and its memory operations are visible. Without a dependent
// launch it returns at once (the stream already ordered the grids).
__device__ __forceinline__ void wait_for_prerequisite_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// In the prerequisite kernel: the dependent grid may be launched once every CTA of this grid has
// called this (or exited). So no dependent CTA can take a multiprocessor from a CTA of this grid
// that has yet to start; it gains most where the grid's CTAs are all resident at once.
__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Launches `kernel` after the work already queued on `stream`, as a programmatic dependent of
// the grid before it where `dependent` (the device is sm_90 or later), plainly otherwise.
template <typename... KernelArgs, typename... Args>
void launch_dependent(bool dependent, void (*kernel)(KernelArgs...), dim3 grid, dim3 block,
                      std::size_t dynamic_smem_bytes, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = dynamic_smem_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = dependent ? &attribute : nullptr;
  config.numAttrs = dependent ? 1 : 0;
  FLEXKIT_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace flexkit::backend::cuda
