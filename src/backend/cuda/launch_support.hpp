// What the CUDA executors share around a launch: device attributes (asked once per device) and
// scratch device memory for one launch's side results.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <map>
#include <mutex>
#include <utility>

#include "backend/cuda/check.hpp"
#include "core/device_memory.hpp"

namespace flexkit::backend::cuda {

// A device attribute, asked once per device (the executors ask for it at every call).
inline int device_attribute(cudaDeviceAttr attribute, int device) {
  static std::mutex mutex;
  static std::map<std::pair<int, int>, int> known;
  std::lock_guard<std::mutex> lock(mutex);
  const std::pair<int, int> key{static_cast<int>(attribute), device};
  if (auto it = known.find(key); it != known.end()) return it->second;
  int value = 0;
  FLEXKIT_CUDA_CHECK(cudaDeviceGetAttribute(&value, attribute, device));
  return known.emplace(key, value).first->second;
}

inline int multiprocessors(int device) {
  return device_attribute(cudaDevAttrMultiProcessorCount, device);
}

// Whether the device groups blocks into clusters with distributed shared memory (sm_90 on).
inline bool has_clusters(int device) {
  return device_attribute(cudaDevAttrComputeCapabilityMajor, device) >= 9;
}

// Scratch device memory for one launch. Released right after the launches are queued: the
// caching allocator hands a block out again only on the same stream, so stream order keeps the
// kernels' use of it safe.
class Scratch {
 public:
  Scratch(int device, std::size_t bytes)
      : device_(device), ptr_(bytes ? allocate(device, bytes) : nullptr) {}
  ~Scratch() {
    if (ptr_) deallocate(device_, ptr_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* get() const { return ptr_; }

 private:
  int device_;
  void* ptr_;
};

}  // namespace flexkit::backend::cuda
