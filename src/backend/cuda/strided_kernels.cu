// CUDA strided copy, flex16 re-scaling copy (with statistics) and fill, plus byte copies
// between devices. Arrays' element moves are rare next to compute kernels, so one generic
// grid-stride kernel per element size serves every layout; contiguous copies use the copy engine.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "backend/cuda/check.hpp"
#include "backend/cuda/graph_capture.hpp"
#include "backend/cuda/pending_expr_stats.hpp"
#include "core/device_memory.hpp"
#include "core/strided_ops.hpp"
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
  return l.rank == 0 || (l.rank == 1 && l.strides[0] == 1);
}

unsigned grid_for(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535));
}

cudaStream_t stream_of(int device) {
  return static_cast<cudaStream_t>(flexkit::cuda::current_stream(device));
}

template <class T, class Index>
__global__ void strided_copy_kernel(StridedLayout dst, T* out, StridedLayout src, const T* in,
                                    Index n) {
  for (Index i = blockIdx.x * Index(blockDim.x) + threadIdx.x; i < n;
       i += Index(gridDim.x) * blockDim.x)
    out[layout_offset<Index>(dst, i)] = in[layout_offset<Index>(src, i)];
}

template <class T, class Index>
__global__ void strided_fill_kernel(StridedLayout dst, T* out, T value, Index n) {
  for (Index i = blockIdx.x * Index(blockDim.x) + threadIdx.x; i < n;
       i += Index(gridDim.x) * blockDim.x)
    out[layout_offset<Index>(dst, i)] = value;
}

// Contiguous fill with 16-byte stores; `vectors` counts uint4s, the tail is done by the host
// path's scalar kernel.
__global__ void dense_fill_kernel(uint4* out, uint4 value, int64_t vectors) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < vectors;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = value;
}

// codegen::ExprStats's layout: an ExprStatsRecords record.
struct DeviceFlex16Stats {
  int max_abs_m;
  unsigned arrivals;
  unsigned long long saturated;
  unsigned long long nan_count;
  void* host;  // kept: the copy kernel leaves the publication to the publish kernel after it
};
static_assert(sizeof(DeviceFlex16Stats) == 32);

template <class Index>
__global__ void flex16_copy_kernel(StridedLayout dst, int16_t* out, StridedLayout src,
                                   const int16_t* in, Index n, int src_iwl, int dst_iwl,
                                   DeviceFlex16Stats* stats) {
  int local_max = 0;
  unsigned long long local_saturated = 0;
  for (Index i = blockIdx.x * Index(blockDim.x) + threadIdx.x; i < n;
       i += Index(gridDim.x) * blockDim.x) {
    portable::Flex16Code c =
        portable::flex16_rescale(in[layout_offset<Index>(src, i)], src_iwl, dst_iwl);
    out[layout_offset<Index>(dst, i)] = c.m;
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

// 32-bit index arithmetic whenever the element count allows it; below 2^31 so a grid-stride
// step past the end cannot wrap around.
bool fits_32(int64_t n) {
  return n < (int64_t{1} << 31);
}

// A 2-D copy whose source is unit-stride along rows and destination along columns (a
// transpose, the layout contiguous() meets most): staged through a shared-memory tile so both
// the reads and the writes are coalesced. The padding column avoids bank conflicts.
constexpr int kTile = 32;
constexpr int kTileRows = 8;

template <class T>
__global__ void transpose_tile_kernel(T* out, int64_t out_row_stride, const T* in,
                                      int64_t in_col_stride, int64_t rows, int64_t cols) {
  __shared__ T tile[kTile][kTile + 1];
  const int64_t i0 = int64_t(blockIdx.y) * kTile, j0 = int64_t(blockIdx.x) * kTile;
  for (int k = threadIdx.y; k < kTile; k += kTileRows) {
    const int64_t i = i0 + threadIdx.x, j = j0 + k;
    if (i < rows && j < cols) tile[k][threadIdx.x] = in[i + j * in_col_stride];
  }
  __syncthreads();
  for (int k = threadIdx.y; k < kTile; k += kTileRows) {
    const int64_t i = i0 + k, j = j0 + threadIdx.x;
    if (i < rows && j < cols) out[i * out_row_stride + j] = tile[threadIdx.x][k];
  }
}

bool is_transpose(const StridedLayout& dst, const StridedLayout& src) {
  return dst.rank == 2 && dst.strides[1] == 1 && src.strides[0] == 1 && src.strides[1] != 0 &&
         (dst.shape[0] + kTile - 1) / kTile <= 65535;
}

template <class T>
void launch_copy(int device, const StridedDst& dst_in, const StridedSrc& src_in) {
  StridedLayout layouts[2] = {dst_in.layout, src_in.layout};
  portable::coalesce_layouts(layouts, 2);
  const StridedLayout& dst = layouts[0];
  const StridedLayout& src = layouts[1];
  int64_t n = element_count(dst);
  if (n == 0) return;
  DeviceGuard guard(device);
  cudaStream_t stream = stream_of(device);
  auto* out = static_cast<T*>(dst_in.base);
  const auto* in = static_cast<const T*>(src_in.base);
  if (is_dense(dst) && is_dense(src)) {
    FLEXKIT_CUDA_CHECK(
        cudaMemcpyAsync(out, in, size_t(n) * sizeof(T), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  if (is_transpose(dst, src)) {
    dim3 grid(static_cast<unsigned>((dst.shape[1] + kTile - 1) / kTile),
              static_cast<unsigned>((dst.shape[0] + kTile - 1) / kTile));
    transpose_tile_kernel<T><<<grid, dim3(kTile, kTileRows), 0, stream>>>(
        out, dst.strides[0], in, src.strides[1], dst.shape[0], dst.shape[1]);
    FLEXKIT_CUDA_CHECK_LAUNCH("transpose_tile_kernel");
    return;
  }
  if (fits_32(n))
    strided_copy_kernel<T, uint32_t>
        <<<grid_for(n), kThreads, 0, stream>>>(dst, out, src, in, uint32_t(n));
  else
    strided_copy_kernel<T, int64_t><<<grid_for(n), kThreads, 0, stream>>>(dst, out, src, in, n);
  FLEXKIT_CUDA_CHECK_LAUNCH("strided_copy_kernel");
}

template <class T>
void launch_fill(int device, const StridedDst& dst_in, std::uint64_t pattern) {
  StridedLayout dst = dst_in.layout;
  portable::coalesce_layouts(&dst, 1);
  int64_t n = element_count(dst);
  if (n == 0) return;
  DeviceGuard guard(device);
  cudaStream_t stream = stream_of(device);
  T value;
  memcpy(&value, &pattern, sizeof(T));
  auto* out = static_cast<T*>(dst_in.base);
  if (is_dense(dst)) {
    unsigned char bytes[sizeof(T)];
    memcpy(bytes, &value, sizeof(T));
    if (std::all_of(bytes, bytes + sizeof(T), [&](unsigned char b) { return b == bytes[0]; })) {
      FLEXKIT_CUDA_CHECK(cudaMemsetAsync(out, bytes[0], size_t(n) * sizeof(T), stream));
      return;
    }
    // 16-byte stores over the aligned body; the unaligned head and the tail go element-wise.
    auto address = reinterpret_cast<std::uintptr_t>(out);
    int64_t head = int64_t((16 - address % 16) % 16) / int64_t(sizeof(T));
    if (address % sizeof(T) == 0 && head < n) {
      int64_t vectors = (n - head) * int64_t(sizeof(T)) / 16;
      if (vectors > 0) {
        uint4 v;
        unsigned char* vb = reinterpret_cast<unsigned char*>(&v);
        for (int k = 0; k < 16; ++k) vb[k] = bytes[k % sizeof(T)];
        dense_fill_kernel<<<grid_for(vectors), kThreads, 0, stream>>>(
            reinterpret_cast<uint4*>(out + head), v, vectors);
        FLEXKIT_CUDA_CHECK_LAUNCH("dense_fill_kernel");
        int64_t done = head + vectors * 16 / int64_t(sizeof(T));
        if (head > 0) {
          StridedLayout h = {1, {head}, {1}};
          strided_fill_kernel<T, uint32_t>
              <<<1, kThreads, 0, stream>>>(h, out, value, uint32_t(head));
        }
        if (done < n) {
          StridedLayout t = {1, {n - done}, {1}};
          strided_fill_kernel<T, uint32_t>
              <<<1, kThreads, 0, stream>>>(t, out + done, value, uint32_t(n - done));
        }
        FLEXKIT_CUDA_CHECK_LAUNCH("strided_fill_kernel");
        return;
      }
    }
  }
  if (fits_32(n))
    strided_fill_kernel<T, uint32_t>
        <<<grid_for(n), kThreads, 0, stream>>>(dst, out, value, uint32_t(n));
  else
    strided_fill_kernel<T, int64_t><<<grid_for(n), kThreads, 0, stream>>>(dst, out, value, n);
  FLEXKIT_CUDA_CHECK_LAUNCH("strided_fill_kernel");
}

}  // namespace

void copy(int device, const StridedDst& dst, const StridedSrc& src, std::size_t elem_size) {
  switch (elem_size) {
    case 1:
      return launch_copy<uint8_t>(device, dst, src);
    case 2:
      return launch_copy<uint16_t>(device, dst, src);
    case 4:
      return launch_copy<uint32_t>(device, dst, src);
    default:
      return launch_copy<uint64_t>(device, dst, src);
  }
}

void fill(int device, const StridedDst& dst, std::uint64_t pattern, std::size_t elem_size) {
  switch (elem_size) {
    case 1:
      return launch_fill<uint8_t>(device, dst, pattern);
    case 2:
      return launch_fill<uint16_t>(device, dst, pattern);
    case 4:
      return launch_fill<uint32_t>(device, dst, pattern);
    default:
      return launch_fill<uint64_t>(device, dst, pattern);
  }
}

std::shared_ptr<::flexkit::detail::PendingFlex16Stats> flex16_copy(int device,
                                                                   const StridedDst& dst_in,
                                                                   const StridedSrc& src_in,
                                                                   int src_iwl, int dst_iwl) {
  StridedLayout layouts[2] = {dst_in.layout, src_in.layout};
  portable::coalesce_layouts(layouts, 2);
  const StridedLayout& dst = layouts[0];
  const StridedLayout& src = layouts[1];
  int64_t n = element_count(dst);
  if (n == 0) return nullptr;
  refuse_in_capture(device, "a flex16 copy (its statistics go to the host)");
  DeviceGuard guard(device);
  cudaStream_t stream = stream_of(device);
  ExprStatsRecords stats(device, 1);
  auto* record = static_cast<DeviceFlex16Stats*>(stats.records());
  auto* out = static_cast<int16_t*>(dst_in.base);
  const auto* in = static_cast<const int16_t*>(src_in.base);
  if (fits_32(n))
    flex16_copy_kernel<uint32_t><<<grid_for(n), kThreads, 0, stream>>>(
        dst, out, src, in, uint32_t(n), src_iwl, dst_iwl, record);
  else
    flex16_copy_kernel<int64_t>
        <<<grid_for(n), kThreads, 0, stream>>>(dst, out, src, in, n, src_iwl, dst_iwl, record);
  FLEXKIT_CUDA_CHECK_LAUNCH("flex16_copy_kernel");
  return stats.publish(stream, false).front();
}

void memcpy_bytes(Device dst_device, void* dst, Device src_device, const void* src,
                  std::size_t bytes) {
  if (bytes == 0) return;
  if (dst_device.is_cuda() && src_device.is_cuda() && dst_device.index != src_device.index) {
    flexkit::cuda::synchronize(src_device.index);  // the source's producers are on its stream
    DeviceGuard guard(dst_device.index);
    cudaStream_t stream = stream_of(dst_device.index);
    FLEXKIT_CUDA_CHECK(
        cudaMemcpyPeerAsync(dst, dst_device.index, src, src_device.index, bytes, stream));
    FLEXKIT_CUDA_CHECK(cudaStreamSynchronize(stream));
    return;
  }
  const int device = dst_device.is_cuda() ? dst_device.index : src_device.index;
  if (dst_device.is_cpu() || src_device.is_cpu())
    refuse_in_capture(device,
                      dst_device.is_cpu() ? "a copy to host memory" : "a copy from host memory");
  DeviceGuard guard(device);
  cudaStream_t stream = stream_of(device);
  FLEXKIT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
  // A host buffer may be released as soon as we return: wait whenever the host is involved.
  if (dst_device.is_cpu() || src_device.is_cpu()) FLEXKIT_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace flexkit::backend::cuda
