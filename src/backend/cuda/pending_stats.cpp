#include "backend/cuda/pending_stats.hpp"

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/cuda/check.hpp"
#include "backend/device_memory.hpp"
#include "core/storage.hpp"

namespace flexkit::backend::cuda {
namespace {

// Pinned host records and their arrival events, reused: allocating pinned memory and creating
// events cost far more than a small product. A slot is handed out again only once its event
// has completed (a record nobody waited for may still be on its way).
struct Slot {
  portable::GemmStats* host = nullptr;
  cudaEvent_t arrived = nullptr;
};

class SlotPool {
 public:
  Slot acquire(int device) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::vector<Slot>& free = free_[device];
      for (std::size_t i = 0; i < free.size(); ++i) {
        const cudaError_t status = cudaEventQuery(free[i].arrived);
        if (status == cudaErrorNotReady) continue;
        FLEXKIT_CUDA_CHECK(status);
        const Slot slot = free[i];
        free[i] = free.back();
        free.pop_back();
        return slot;
      }
    }
    DeviceGuard guard(device);
    Slot slot;
    void* host = nullptr;
    FLEXKIT_CUDA_CHECK(cudaHostAlloc(&host, sizeof(portable::GemmStats), cudaHostAllocPortable));
    slot.host = static_cast<portable::GemmStats*>(host);
    const cudaError_t made = cudaEventCreateWithFlags(&slot.arrived, cudaEventDisableTiming);
    if (made != cudaSuccess) {
      cudaFreeHost(host);
      FLEXKIT_CUDA_CHECK(made);
    }
    return slot;
  }
  void release(int device, Slot slot) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    try {
      free_[device].push_back(slot);
    } catch (...) {
      // Out of host memory for the list: the slot is leaked, not reused.
    }
  }

 private:
  std::mutex mutex_;
  std::map<int, std::vector<Slot>> free_;
};

SlotPool& pool() {
  static auto* p = new SlotPool;  // never destroyed: arrays may outlive static destruction
  return *p;
}

}  // namespace

struct DeviceStatsRecord::Parts {
  int device;
  Slot slot;
  void* record = nullptr;  // device memory, from the caching allocator
  Parts(int d, Slot s) : device(d), slot(s) {}
  ~Parts() {
    if (record) deallocate(device, record);
    pool().release(device, slot);
  }
};

namespace {

class PendingRecord final : public detail::PendingFlex16Stats {
 public:
  explicit PendingRecord(std::unique_ptr<DeviceStatsRecord::Parts> parts)
      : parts_(std::move(parts)) {}
  Flex16Stats wait() override { return to_flex16(wait_record()); }
  portable::GemmStats wait_record() {
    FLEXKIT_CUDA_CHECK(cudaEventSynchronize(parts_->slot.arrived));
    return *parts_->slot.host;
  }
  static Flex16Stats to_flex16(const portable::GemmStats& s) {
    return {s.max_abs_m, s.saturated, 0};
  }

 private:
  std::unique_ptr<DeviceStatsRecord::Parts> parts_;
};

}  // namespace

DeviceStatsRecord::DeviceStatsRecord(int device, cudaStream_t stream) : parts_(nullptr) {
  auto parts = std::make_unique<Parts>(device, pool().acquire(device));
  parts->record = allocate(device, sizeof(portable::GemmStats));
  *parts->slot.host = portable::gemm_stats_identity();
  FLEXKIT_CUDA_CHECK(cudaMemcpyAsync(parts->record, parts->slot.host, sizeof(portable::GemmStats),
                                     cudaMemcpyHostToDevice, stream));
  // Marks when the copy has read the host slot: a record dropped before finish() goes back to
  // the pool, which hands it out again only after that.
  FLEXKIT_CUDA_CHECK(cudaEventRecord(parts->slot.arrived, stream));
  stream_ = stream;
  parts_ = parts.release();
}

DeviceStatsRecord::~DeviceStatsRecord() {
  delete parts_;
}

portable::GemmStats* DeviceStatsRecord::device_record() const {
  return static_cast<portable::GemmStats*>(parts_->record);
}

gemm::ExactStats DeviceStatsRecord::finish(bool wait) {
  FLEXKIT_CUDA_CHECK(cudaMemcpyAsync(parts_->slot.host, parts_->record, sizeof(portable::GemmStats),
                                     cudaMemcpyDeviceToHost, stream_));
  FLEXKIT_CUDA_CHECK(cudaEventRecord(parts_->slot.arrived, stream_));
  std::unique_ptr<Parts> owned(parts_);  // from here on released exactly once, even on a throw
  parts_ = nullptr;
  auto pending = std::make_shared<PendingRecord>(std::move(owned));
  gemm::ExactStats out;
  if (wait) {
    out.value = pending->wait_record();
  } else {
    out.pending = std::move(pending);
  }
  return out;
}

}  // namespace flexkit::backend::cuda
