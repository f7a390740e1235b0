// What the CUDA executors share around a launch: the device's multiprocessor count (asked once
// per device) and scratch device memory for one launch's side results.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <map>
#include <mutex>

#include "backend/cuda/check.hpp"
#include "core/device_memory.hpp"

namespace flexkit::backend::cuda {

inline int multiprocessors(int device) {
  static std::mutex mutex;
  static std::map<int, int> counts;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = counts.find(device); it != counts.end()) return it->second;
  int sms = 0;
  FLEXKIT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  counts.emplace(device, sms);
  return sms;
}

// Whether the device groups blocks into clusters with distributed shared memory (sm_90 on).
inline bool has_clusters(int device) {
  static std::mutex mutex;
  static std::map<int, bool> known;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = known.find(device); it != known.end()) return it->second;
  int major = 0;
  FLEXKIT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return known.emplace(device, major >= 9).first->second;
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
