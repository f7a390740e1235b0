// The caching allocator: cudaMalloc is slow and synchronising, so freed blocks are pooled by
// (device, stream, size class) and handed out again. A block is reused only on the stream it
// was last used on, so stream order makes reuse safe without events.
#include <cuda_runtime_api.h>
#include <algorithm>

#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/cuda/check.hpp"
#include "core/device_memory.hpp"
#include "core/text.hpp"
#include "flexkit/cuda.hpp"
#include "flexkit/error.hpp"

namespace flexkit::cuda {

std::size_t allocation_size_class(std::size_t bytes) {
  constexpr std::size_t kSmallLimit = 1u << 20;  // up to 1 MiB: 512-byte classes
  constexpr std::size_t kSmallGrain = 512;
  constexpr std::size_t kLargeGrain = 2u << 20;  // beyond: 2 MiB classes
  if (bytes == 0) return kSmallGrain;
  std::size_t grain = bytes <= kSmallLimit ? kSmallGrain : kLargeGrain;
  return (bytes + grain - 1) / grain * grain;
}

}  // namespace flexkit::cuda

namespace flexkit::backend::cuda {
namespace {

using detail::cat;
using detail::human_bytes;

struct Block {
  std::size_t size_class;
  void* stream;
};

struct DevicePool {
  std::map<std::pair<void*, std::size_t>, std::vector<void*>> free_blocks;
  std::unordered_map<void*, Block> live;
  flexkit::cuda::AllocatorStats stats;
};

class CachingAllocator {
 public:
  void* allocate(int device, std::size_t bytes) {
    void* stream = flexkit::cuda::current_stream(device);  // validates the device
    const std::size_t size_class = flexkit::cuda::allocation_size_class(bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    DevicePool& pool = pools_[device];
    auto it = pool.free_blocks.find({stream, size_class});
    if (it != pool.free_blocks.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      pool.live[p] = {size_class, stream};
      pool.stats.cached_bytes -= size_class;
      pool.stats.in_use_bytes += size_class;
      pool.stats.peak_in_use_bytes =
          std::max(pool.stats.peak_in_use_bytes, pool.stats.in_use_bytes);
      ++pool.stats.cache_hits;
      return p;
    }
    DeviceGuard guard(device);
    void* p = nullptr;
    cudaError_t status = cudaMalloc(&p, size_class);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      release_cached(device, pool);
      status = cudaMalloc(&p, size_class);
    }
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      std::size_t free_bytes = 0, total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      cudaGetLastError();
      throw OutOfMemoryError(
          cat("cuda:", device, ": out of memory allocating ", human_bytes(double(bytes)), " (",
              bytes, " bytes); flexkit holds ", human_bytes(double(pool.stats.in_use_bytes)),
              " in live arrays and ", human_bytes(double(pool.stats.cached_bytes)),
              " cached (cached blocks were released before retrying); the device has ",
              human_bytes(double(free_bytes)), " free of ", human_bytes(double(total_bytes))));
    }
    FLEXKIT_CUDA_CHECK(status);
    pool.live[p] = {size_class, stream};
    pool.stats.in_use_bytes += size_class;
    pool.stats.peak_in_use_bytes = std::max(pool.stats.peak_in_use_bytes, pool.stats.in_use_bytes);
    ++pool.stats.device_allocations;
    return p;
  }

  void deallocate(int device, void* p) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    DevicePool& pool = pools_[device];
    auto it = pool.live.find(p);
    if (it == pool.live.end()) return;  // not ours: nothing sensible to do in a destructor
    Block b = it->second;
    pool.live.erase(it);
    pool.free_blocks[{b.stream, b.size_class}].push_back(p);
    pool.stats.in_use_bytes -= b.size_class;
    pool.stats.cached_bytes += b.size_class;
  }

  flexkit::cuda::AllocatorStats stats(int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    return pools_[device].stats;
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [device, pool] : pools_) {
      DeviceGuard guard(device);
      release_cached(device, pool);
    }
  }

 private:
  void release_cached(int /*device*/, DevicePool& pool) {
    // Frees may race pending kernels on a block's stream; cudaFree waits for the device.
    for (auto& [key, blocks] : pool.free_blocks) {
      for (void* p : blocks) {
        cudaFree(p);
        pool.stats.cached_bytes -= key.second;
      }
      blocks.clear();
    }
    pool.free_blocks.clear();
  }

  std::mutex mutex_;
  std::unordered_map<int, DevicePool> pools_;
};

// Never destroyed: arrays in static storage may be freed after main returns.
CachingAllocator& allocator() {
  static CachingAllocator* instance = new CachingAllocator();
  return *instance;
}

}  // namespace

void* allocate(int device, std::size_t bytes) {
  return allocator().allocate(device, bytes);
}
void deallocate(int device, void* ptr) noexcept {
  allocator().deallocate(device, ptr);
}

}  // namespace flexkit::backend::cuda

namespace flexkit::cuda {

AllocatorStats allocator_stats(int device) {
  return backend::cuda::allocator().stats(device);
}
void empty_cache() {
  backend::cuda::allocator().empty_cache();
}

}  // namespace flexkit::cuda
