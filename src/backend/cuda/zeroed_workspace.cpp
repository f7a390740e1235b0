#include "backend/cuda/zeroed_workspace.hpp"

#include <map>
#include <mutex>
#include <utility>

#include "backend/cuda/check.hpp"

namespace flexkit::backend::cuda {
namespace {

struct Buffer {
  void* data = nullptr;
  std::size_t bytes = 0;
};

std::mutex& buffers_mutex() {
  static auto* m = new std::mutex;  // never destroyed: arrays may outlive static destruction
  return *m;
}
std::map<std::pair<int, cudaStream_t>, Buffer>& buffers() {
  static auto* b = new std::map<std::pair<int, cudaStream_t>, Buffer>;
  return *b;
}

}  // namespace

void* zeroed_workspace(int device, cudaStream_t stream, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(buffers_mutex());
  Buffer& buffer = buffers()[{device, stream}];
  if (buffer.bytes >= bytes && buffer.data != nullptr) return buffer.data;
  DeviceGuard guard(device);
  // Growing: the kernels queued on the old buffer finish first (rare: a larger geometry).
  if (buffer.data != nullptr) {
    FLEXKIT_CUDA_CHECK(cudaStreamSynchronize(stream));
    FLEXKIT_CUDA_CHECK(cudaFree(buffer.data));
    buffer = {};
  }
  // Rounded up, so that a few slightly larger geometries do not each grow it.
  const std::size_t rounded = (bytes + 65535) & ~std::size_t(65535);
  void* data = nullptr;
  FLEXKIT_CUDA_CHECK(cudaMalloc(&data, rounded));
  const cudaError_t zeroed = cudaMemsetAsync(data, 0, rounded, stream);
  if (zeroed != cudaSuccess) {
    cudaFree(data);
    FLEXKIT_CUDA_CHECK(zeroed);
  }
  buffer = {data, rounded};
  return data;
}

}  // namespace flexkit::backend::cuda
