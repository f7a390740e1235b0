#include "backend/cuda/pending_stats.hpp"

#include "backend/cuda/graph_capture.hpp"

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/cuda/check.hpp"
#include "backend/cuda/stats_publish.hpp"
#include "core/storage.hpp"

namespace flexkit::backend::cuda {
namespace {

// A record's home, reused from call to call: a device record that is the identity whenever the
// slot is free (the publish sets it back), mapped pinned host memory the publish writes into, the
// arrival counter of an in-kernel publication (0 whenever the slot is free), and the event that
// marks the publish done. Allocating pinned memory and creating events cost far more than a small
// product, and an in-stream copy each way around a product cost more than its kernel's launch
// (both copies are gone: the record needs no setting before a product, and the publish writes
// the host copy). A slot is handed out again only once its
// event has completed.
struct Slot {
  portable::GemmStats* host = nullptr;            // pinned, mapped
  portable::GemmStats* host_on_device = nullptr;  // its address on the device
  portable::GemmStats* record = nullptr;          // device memory
  std::uint32_t* arrivals = nullptr;              // device memory
  cudaEvent_t published = nullptr;
};

class SlotPool {
 public:
  Slot acquire(int device) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::vector<Slot>& free = free_[device];
      for (std::size_t i = 0; i < free.size(); ++i) {
        const cudaError_t status = cudaEventQuery(free[i].published);
        if (status == cudaErrorNotReady) continue;
        FLEXKIT_CUDA_CHECK(status);
        const Slot slot = free[i];
        free[i] = free.back();
        free.pop_back();
        return slot;
      }
    }
    return make(device);
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
  static Slot make(int device) {
    DeviceGuard guard(device);
    Slot slot;
    // Freed in reverse order if a later step fails.
    auto undo = [&] {
      if (slot.published) cudaEventDestroy(slot.published);
      if (slot.arrivals) cudaFree(slot.arrivals);
      if (slot.record) cudaFree(slot.record);
      if (slot.host) cudaFreeHost(slot.host);
    };
    try {
      void* host = nullptr;
      FLEXKIT_CUDA_CHECK(cudaHostAlloc(&host, sizeof(portable::GemmStats),
                                       cudaHostAllocPortable | cudaHostAllocMapped));
      slot.host = static_cast<portable::GemmStats*>(host);
      void* mapped = nullptr;
      FLEXKIT_CUDA_CHECK(cudaHostGetDevicePointer(&mapped, host, 0));
      slot.host_on_device = static_cast<portable::GemmStats*>(mapped);
      void* record = nullptr;
      FLEXKIT_CUDA_CHECK(cudaMalloc(&record, sizeof(portable::GemmStats)));
      slot.record = static_cast<portable::GemmStats*>(record);
      const portable::GemmStats identity = portable::gemm_stats_identity();
      FLEXKIT_CUDA_CHECK(cudaMemcpy(record, &identity, sizeof identity, cudaMemcpyHostToDevice));
      void* arrivals = nullptr;
      FLEXKIT_CUDA_CHECK(cudaMalloc(&arrivals, sizeof(std::uint32_t)));
      slot.arrivals = static_cast<std::uint32_t*>(arrivals);
      FLEXKIT_CUDA_CHECK(cudaMemset(arrivals, 0, sizeof(std::uint32_t)));
      FLEXKIT_CUDA_CHECK(cudaEventCreateWithFlags(&slot.published, cudaEventDisableTiming));
    } catch (...) {
      undo();
      throw;
    }
    return slot;
  }

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
  Parts(int d, Slot s) : device(d), slot(s) {}
  ~Parts() { pool().release(device, slot); }
};

namespace {

class PendingRecord final : public detail::PendingFlex16Stats {
 public:
  explicit PendingRecord(std::unique_ptr<DeviceStatsRecord::Parts> parts)
      : parts_(std::move(parts)) {}
  Flex16Stats wait() override { return to_flex16(wait_record()); }
  portable::GemmStats wait_record() {
    FLEXKIT_CUDA_CHECK(cudaEventSynchronize(parts_->slot.published));
    return *parts_->slot.host;  // written by the publish kernel, which the event follows
  }
  static Flex16Stats to_flex16(const portable::GemmStats& s) {
    return {s.max_abs_m, s.saturated, 0};
  }

 private:
  std::unique_ptr<DeviceStatsRecord::Parts> parts_;
};

// The publish kernel (unless the product's kernel published the record) and the event, queued
// behind the product.
void publish(const Slot& slot, bool published_in_kernel, cudaStream_t stream) {
  if (!published_in_kernel)
    launch_publish_stats(slot.record, slot.host_on_device, slot.arrivals, stream);
  FLEXKIT_CUDA_CHECK(cudaEventRecord(slot.published, stream));
}

}  // namespace

DeviceStatsRecord::DeviceStatsRecord(int device, cudaStream_t stream)
    : parts_((refuse_in_capture(device, "a flex16 product (its statistics go to the host)"),
              new Parts(device, pool().acquire(device)))),
      stream_(stream) {}

DeviceStatsRecord::~DeviceStatsRecord() {
  if (!parts_) return;
  // Dropped before finish() (an exception on the way): the kernels queued so far may still
  // change the record, so the slot goes back only behind a publish that resets it. If even that
  // cannot be queued, the slot is leaked rather than handed out in an unknown state.
  try {
    publish(parts_->slot, false, stream_);
    delete parts_;
  } catch (...) {
  }
}

portable::GemmStats* DeviceStatsRecord::device_record() const {
  return parts_->slot.record;
}

portable::GemmStats* DeviceStatsRecord::host_record_on_device() const {
  return parts_->slot.host_on_device;
}

std::uint32_t* DeviceStatsRecord::arrivals() const {
  return parts_->slot.arrivals;
}

gemm::ExactStats DeviceStatsRecord::finish(bool wait) {
  std::unique_ptr<Parts> owned(parts_);  // from here on released exactly once, even on a throw
  parts_ = nullptr;
  try {
    publish(owned->slot, published_in_kernel_, stream_);
  } catch (...) {
    owned.release();  // leaked: its record may never be reset
    throw;
  }
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
