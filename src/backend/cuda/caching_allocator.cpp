// The caching allocator: cudaMalloc is slow and synchronising, so freed blocks are pooled by
// (device, stream, size class) and handed out again. A block is reused only on the stream it
// was last used on, so stream order makes reuse safe without events.
//
// A captured CUDA graph replays with the addresses it was captured with, so what its work
// allocated (and what it freed) must not go to another array while the graph lives: blocks
// allocated or freed during a capture belong to that capture's pool, which only the capture
// draws on, and which returns to the common pool (0) when the graph is dropped.
#include <cuda_runtime_api.h>
#include <algorithm>
#include <functional>

#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/cuda/check.hpp"
#include "backend/cuda/graph_capture.hpp"
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
  std::uint64_t pool;  // 0: the common pool; else a capture's
};

struct DevicePool {
  // (pool, stream, size class) -> free blocks
  std::map<std::tuple<std::uint64_t, void*, std::size_t>, std::vector<void*>> free_blocks;
  std::unordered_map<void*, Block> live;
  flexkit::cuda::AllocatorStats stats;
  std::size_t limit = 0;  // on in-use plus cached bytes; 0: none
  std::uint64_t next_pool = 1;
  bool record_peak = false;              // keep peak_blocks (a diagnosis: it costs a copy a peak)
  std::vector<std::size_t> peak_blocks;  // live blocks' size classes at the latest peak
};

// in_use_bytes grew by a block: the peak follows, and its blocks where they are recorded.
void note_growth(DevicePool& pool) {
  if (pool.stats.in_use_bytes <= pool.stats.peak_in_use_bytes) return;
  pool.stats.peak_in_use_bytes = pool.stats.in_use_bytes;
  if (!pool.record_peak) return;
  pool.peak_blocks.clear();
  for (const auto& [p, block] : pool.live) pool.peak_blocks.push_back(block.size_class);
}

// A free block of (pool, stream, size class), taken off its list; nullptr when there is none.
void* take_free(DevicePool& pool, std::uint64_t id, void* stream, std::size_t size_class) {
  auto it = pool.free_blocks.find({id, stream, size_class});
  if (it == pool.free_blocks.end() || it->second.empty()) return nullptr;
  void* p = it->second.back();
  it->second.pop_back();
  return p;
}

class CachingAllocator {
 public:
  void* allocate(int device, std::size_t bytes) {
    void* stream = flexkit::cuda::current_stream(device);  // validates the device
    const std::size_t size_class = flexkit::cuda::allocation_size_class(bytes);
    const std::uint64_t capture = capture_pool(device);
    std::lock_guard<std::mutex> lock(mutex_);
    DevicePool& pool = pools_[device];
    // A capture takes its own freed blocks first, then free blocks of the common pool (free
    // means no array refers to them, so the graph may keep them).
    void* p = take_free(pool, capture, stream, size_class);
    if (!p && capture != 0) p = take_free(pool, 0, stream, size_class);
    if (p) {
      pool.live[p] = {size_class, stream, capture};
      pool.stats.cached_bytes -= size_class;
      pool.stats.in_use_bytes += size_class;
      note_growth(pool);
      ++pool.stats.cache_hits;
      return p;
    }
    DeviceGuard guard(device);
    const auto over_limit = [&] {
      return pool.limit != 0 &&
             pool.stats.in_use_bytes + pool.stats.cached_bytes + size_class > pool.limit;
    };
    // cudaFree waits for the device, which a capture cannot hold: the cache stays then.
    if (over_limit() && capture == 0) release_cached(device, pool);
    if (over_limit()) throw out_of_memory(device, pool, bytes, capture);
    cudaError_t status = cudaMalloc(&p, size_class);
    if (status == cudaErrorMemoryAllocation && capture == 0) {
      cudaGetLastError();
      release_cached(device, pool);
      status = cudaMalloc(&p, size_class);
    }
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      throw out_of_memory(device, pool, bytes, capture);
    }
    FLEXKIT_CUDA_CHECK(status);
    pool.live[p] = {size_class, stream, capture};
    pool.stats.in_use_bytes += size_class;
    note_growth(pool);
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
    // Freed during a capture: the graph may still use it (the capture only recorded the work).
    const std::uint64_t capture = capture_pool(device);
    if (b.pool == 0 && capture != 0) b.pool = capture;
    pool.free_blocks[{b.pool, b.stream, b.size_class}].push_back(p);
    pool.stats.in_use_bytes -= b.size_class;
    pool.stats.cached_bytes += b.size_class;
  }

  flexkit::cuda::AllocatorStats stats(int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    return pools_[device].stats;
  }

  std::uint64_t new_pool(int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    return pools_[device].next_pool++;
  }

  // A dropped graph's blocks join the common pool, the free ones now, the live ones when freed.
  void release_pool(int device, std::uint64_t id) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    DevicePool& pool = pools_[device];
    for (auto it = pool.free_blocks.begin(); it != pool.free_blocks.end();) {
      const auto& [owner, stream, size_class] = it->first;
      if (owner != id) {
        ++it;
        continue;
      }
      std::vector<void*>& common = pool.free_blocks[{0, stream, size_class}];
      common.insert(common.end(), it->second.begin(), it->second.end());
      it = pool.free_blocks.erase(it);
    }
    for (auto& [p, block] : pool.live)
      if (block.pool == id) block.pool = 0;
  }

  void record_peak(int device, bool on) {
    std::lock_guard<std::mutex> lock(mutex_);
    DevicePool& pool = pools_[device];
    pool.record_peak = on;
    pool.peak_blocks.clear();
    pool.stats.peak_in_use_bytes = pool.stats.in_use_bytes;  // the next peak is recorded
  }

  std::vector<std::size_t> peak_blocks(int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::size_t> out = pools_[device].peak_blocks;
    std::sort(out.begin(), out.end(), std::greater<>());
    return out;
  }

  void set_limit(int device, std::size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    pools_[device].limit = bytes;
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [device, pool] : pools_) {
      DeviceGuard guard(device);
      release_cached(device, pool);
    }
  }

 private:
  // The common pool's free blocks back to the driver (a capture's stay: its graph may use them).
  void release_cached(int /*device*/, DevicePool& pool) {
    // Frees may race pending kernels on a block's stream; cudaFree waits for the device.
    for (auto it = pool.free_blocks.begin(); it != pool.free_blocks.end();) {
      const auto& [owner, stream, size_class] = it->first;
      if (owner != 0) {
        ++it;
        continue;
      }
      for (void* p : it->second) {
        cudaFree(p);
        pool.stats.cached_bytes -= size_class;
      }
      it = pool.free_blocks.erase(it);
    }
  }

  static OutOfMemoryError out_of_memory(int device, const DevicePool& pool, std::size_t bytes,
                                        std::uint64_t capture) {
    std::size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    cudaGetLastError();
    return OutOfMemoryError(
        cat("cuda:", device, ": out of memory allocating ", human_bytes(double(bytes)), " (", bytes,
            " bytes)", capture != 0 ? " while capturing a CUDA graph" : "",
            pool.limit != 0 ? cat(" under the limit of ", human_bytes(double(pool.limit)),
                                  " set by set_memory_limit")
                            : std::string(),
            "; flexkit holds ", human_bytes(double(pool.stats.in_use_bytes)),
            " in live arrays and ", human_bytes(double(pool.stats.cached_bytes)), " cached",
            capture != 0 ? std::string(" (a capture cannot release cached blocks)")
                         : std::string(" (cached blocks were released before retrying)"),
            "; the device has ", human_bytes(double(free_bytes)), " free of ",
            human_bytes(double(total_bytes))));
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
std::uint64_t new_memory_pool(int device) {
  return allocator().new_pool(device);
}
void release_memory_pool(int device, std::uint64_t pool) noexcept {
  allocator().release_pool(device, pool);
}

}  // namespace flexkit::backend::cuda

namespace flexkit::cuda {

AllocatorStats allocator_stats(int device) {
  return backend::cuda::allocator().stats(device);
}
void empty_cache() {
  backend::cuda::allocator().empty_cache();
}
void set_memory_limit(int device, std::size_t bytes) {
  current_stream(device);  // validates the device
  backend::cuda::allocator().set_limit(device, bytes);
}
void record_peak_blocks(int device, bool on) {
  current_stream(device);  // validates the device
  backend::cuda::allocator().record_peak(device, on);
}
std::vector<std::size_t> peak_blocks(int device) {
  current_stream(device);
  return backend::cuda::allocator().peak_blocks(device);
}

}  // namespace flexkit::cuda
