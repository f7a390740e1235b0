#include "backend/cuda/pending_expr_stats.hpp"

#include <map>
#include <mutex>
#include <stdexcept>

#include "backend/cuda/check.hpp"
#include "codegen/cuda_expr_source.hpp"
#include "codegen/cuda_step_kernel_source.hpp"

namespace flexkit::backend::cuda {
namespace {

using codegen::ExprStats;

// Room for every flex16 output one launch can have.
constexpr std::size_t kBatchRecords = codegen::kStepMaxSlots;

// One launch's records on the host: pinned memory the copy lands in and the event behind it.
// Reused from launch to launch (pinned allocations and events cost far more than a small
// kernel); handed out again only once its event has completed.
struct Batch {
  ExprStats* host = nullptr;
  cudaEvent_t copied = nullptr;
};

class BatchPool {
 public:
  Batch acquire(int device) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::vector<Batch>& free = free_[device];
      for (std::size_t i = 0; i < free.size(); ++i) {
        const cudaError_t status = cudaEventQuery(free[i].copied);
        if (status == cudaErrorNotReady) continue;
        FLEXKIT_CUDA_CHECK(status);
        const Batch batch = free[i];
        free[i] = free.back();
        free.pop_back();
        return batch;
      }
    }
    return make(device);
  }
  void release(int device, Batch batch) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    try {
      free_[device].push_back(batch);
    } catch (...) {
      // Out of host memory for the list: the batch is leaked, not reused.
    }
  }

 private:
  static Batch make(int device) {
    DeviceGuard guard(device);
    Batch batch;
    void* host = nullptr;
    FLEXKIT_CUDA_CHECK(
        cudaHostAlloc(&host, sizeof(ExprStats) * kBatchRecords, cudaHostAllocPortable));
    batch.host = static_cast<ExprStats*>(host);
    const cudaError_t status = cudaEventCreateWithFlags(&batch.copied, cudaEventDisableTiming);
    if (status != cudaSuccess) {
      cudaFreeHost(host);
      FLEXKIT_CUDA_CHECK(status);
    }
    return batch;
  }

  std::mutex mutex_;
  std::map<int, std::vector<Batch>> free_;
};

BatchPool& pool() {
  static auto* p = new BatchPool;  // never destroyed: arrays may outlive static destruction
  return *p;
}

struct Shared {
  int device;
  Batch batch;
  Shared(int d, Batch b) : device(d), batch(b) {}
  ~Shared() { pool().release(device, batch); }
};

class PendingExprStats final : public detail::PendingFlex16Stats {
 public:
  PendingExprStats(std::shared_ptr<Shared> shared, std::size_t index)
      : shared_(std::move(shared)), index_(index) {}
  Flex16Stats wait() override {
    FLEXKIT_CUDA_CHECK(cudaEventSynchronize(shared_->batch.copied));
    const ExprStats& r = shared_->batch.host[index_];
    Flex16Stats s{};
    s.max_abs_m = r.max_abs_m;
    s.saturated = r.saturated;
    s.nan_count = r.nan_count;
    return s;
  }

 private:
  std::shared_ptr<Shared> shared_;
  std::size_t index_;
};

}  // namespace

std::vector<std::shared_ptr<detail::PendingFlex16Stats>> pending_expr_stats(
    int device, cudaStream_t stream, const void* device_records, std::size_t count) {
  if (count > kBatchRecords)
    throw std::logic_error("pending_expr_stats: more records than one launch can have");
  auto shared = std::make_shared<Shared>(device, pool().acquire(device));
  FLEXKIT_CUDA_CHECK(cudaMemcpyAsync(shared->batch.host, device_records, sizeof(ExprStats) * count,
                                     cudaMemcpyDeviceToHost, stream));
  FLEXKIT_CUDA_CHECK(cudaEventRecord(shared->batch.copied, stream));
  std::vector<std::shared_ptr<detail::PendingFlex16Stats>> out;
  for (std::size_t i = 0; i < count; ++i)
    out.push_back(std::make_shared<PendingExprStats>(shared, i));
  return out;
}

}  // namespace flexkit::backend::cuda
