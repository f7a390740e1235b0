// CUDA strided copy, flex16 re-scaling copy (with statistics) and fill, plus byte copies
// between devices. Arrays' element moves are rare next to compute kernels, so one generic
// grid-stride kernel per element size serves every layout; contiguous copies use the copy engine.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "backend/cuda/check.hpp"
#include "backend/device_memory.hpp"
#include "backend/strided_ops.hpp"
#include "flexkit/cuda.hpp"

namespace flexkit::backend::cuda {
namespace {

using portable::layout_offset;

constexpr int kThreads = 256;

int64_t element_count(const StridedLayout& l) {
  int64_t n = 1;
  for (int d = 0; d < l.rank; ++d) n *= l.shape[d];
  return n;
}

bool is_dense(const StridedLayout& l) {
  int64_t expected = 1;
  for (int d = l.rank - 1; d >= 0; --d) {
    if (l.shape[d] != 1 && l.strides[d] != expected) return false;
    expected *= l.shape[d];
  }
  return true;
}

unsigned grid_for(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535));
}

cudaStream_t stream_of(int device) {
  return static_cast<cudaStream_t>(flexkit::cuda::current_stream(device));
}

template <class T>
__global__ void strided_copy_kernel(StridedLayout dst, T* out, StridedLayout src, const T* in,
                                    int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[layout_offset(dst, i)] = in[layout_offset(src, i)];
}

template <class T>
__global__ void strided_fill_kernel(StridedLayout dst, T* out, T value, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[layout_offset(dst, i)] = value;
}

struct DeviceFlex16Stats {
  int max_abs_m;
  unsigned long long saturated;
};

__global__ void flex16_copy_kernel(StridedLayout dst, int16_t* out, StridedLayout src,
                                   const int16_t* in, int64_t n, int src_iwl, int dst_iwl,
                                   DeviceFlex16Stats* stats) {
  int local_max = 0;
  unsigned long long local_saturated = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    portable::Flex16Code c = portable::flex16_rescale(in[layout_offset(src, i)], src_iwl, dst_iwl);
    out[layout_offset(dst, i)] = c.m;
    local_max = max(local_max, abs(int(c.m)));
    local_saturated += c.saturated;
  }
  // Warp-reduce first so each warp issues one atomic of each kind.
  for (int offset = 16; offset > 0; offset >>= 1) {
    local_max = max(local_max, __shfl_down_sync(0xffffffffu, local_max, offset));
    local_saturated += __shfl_down_sync(0xffffffffu, local_saturated, offset);
  }
  if ((threadIdx.x & 31) == 0) {
    atomicMax(&stats->max_abs_m, local_max);
    if (local_saturated) atomicAdd(&stats->saturated, local_saturated);
  }
}

template <class T>
void launch_copy(int device, const StridedDst& dst, const StridedSrc& src) {
  int64_t n = element_count(dst.layout);
  if (n == 0) return;
  DeviceGuard guard(device);
  cudaStream_t stream = stream_of(device);
  if (is_dense(dst.layout) && is_dense(src.layout)) {
    FLEXKIT_CUDA_CHECK(cudaMemcpyAsync(dst.base, src.base, size_t(n) * sizeof(T),
                                       cudaMemcpyDeviceToDevice, stream));
    return;
  }
  strided_copy_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(
      dst.layout, static_cast<T*>(dst.base), src.layout, static_cast<const T*>(src.base), n);
  FLEXKIT_CUDA_CHECK_LAUNCH("strided_copy_kernel");
}

template <class T>
void launch_fill(int device, const StridedDst& dst, std::uint64_t pattern) {
  int64_t n = element_count(dst.layout);
  if (n == 0) return;
  DeviceGuard guard(device);
  T value;
  memcpy(&value, &pattern, sizeof(T));
  strided_fill_kernel<T><<<grid_for(n), kThreads, 0, stream_of(device)>>>(
      dst.layout, static_cast<T*>(dst.base), value, n);
  FLEXKIT_CUDA_CHECK_LAUNCH("strided_fill_kernel");
}

}  // namespace

void copy(int device, const StridedDst& dst, const StridedSrc& src, std::size_t elem_size) {
  switch (elem_size) {
    case 1: return launch_copy<uint8_t>(device, dst, src);
    case 2: return launch_copy<uint16_t>(device, dst, src);
    case 4: return launch_copy<uint32_t>(device, dst, src);
    default: return launch_copy<uint64_t>(device, dst, src);
  }
}

void fill(int device, const StridedDst& dst, std::uint64_t pattern, std::size_t elem_size) {
  switch (elem_size) {
    case 1: return launch_fill<uint8_t>(device, dst, pattern);
    case 2: return launch_fill<uint16_t>(device, dst, pattern);
    case 4: return launch_fill<uint32_t>(device, dst, pattern);
    default: return launch_fill<uint64_t>(device, dst, pattern);
  }
}

Flex16Stats flex16_copy(int device, const StridedDst& dst, const StridedSrc& src, int src_iwl,
                        int dst_iwl) {
  int64_t n = element_count(dst.layout);
  if (n == 0) return {};
  DeviceGuard guard(device);
  cudaStream_t stream = stream_of(device);
  auto* stats = static_cast<DeviceFlex16Stats*>(allocate(device, sizeof(DeviceFlex16Stats)));
  DeviceFlex16Stats host{};
  try {
    FLEXKIT_CUDA_CHECK(cudaMemsetAsync(stats, 0, sizeof(DeviceFlex16Stats), stream));
    flex16_copy_kernel<<<grid_for(n), kThreads, 0, stream>>>(
        dst.layout, static_cast<int16_t*>(dst.base), src.layout,
        static_cast<const int16_t*>(src.base), n, src_iwl, dst_iwl, stats);
    FLEXKIT_CUDA_CHECK_LAUNCH("flex16_copy_kernel");
    FLEXKIT_CUDA_CHECK(
        cudaMemcpyAsync(&host, stats, sizeof host, cudaMemcpyDeviceToHost, stream));
    FLEXKIT_CUDA_CHECK(cudaStreamSynchronize(stream));
  } catch (...) {
    deallocate(device, stats);
    throw;
  }
  deallocate(device, stats);
  Flex16Stats out{};
  out.max_abs_m = host.max_abs_m;
  out.saturated = host.saturated;
  return out;
}

void memcpy_bytes(Device dst_device, void* dst, Device src_device, const void* src,
                  std::size_t bytes) {
  if (bytes == 0) return;
  if (dst_device.is_cuda() && src_device.is_cuda() && dst_device.index != src_device.index) {
    flexkit::cuda::synchronize(src_device.index);  // the source's producers are on its stream
    DeviceGuard guard(dst_device.index);
    cudaStream_t stream = stream_of(dst_device.index);
    FLEXKIT_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device.index, src, src_device.index, bytes,
                                           stream));
    FLEXKIT_CUDA_CHECK(cudaStreamSynchronize(stream));
    return;
  }
  const int device = dst_device.is_cuda() ? dst_device.index : src_device.index;
  DeviceGuard guard(device);
  cudaStream_t stream = stream_of(device);
  FLEXKIT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
  // A host buffer may be released as soon as we return: wait whenever the host is involved.
  if (dst_device.is_cpu() || src_device.is_cpu()) FLEXKIT_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace flexkit::backend::cuda
