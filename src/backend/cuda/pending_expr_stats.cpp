#include "backend/cuda/pending_expr_stats.hpp"

#include <map>
#include <mutex>
#include <stdexcept>

#include "backend/cuda/check.hpp"
#include "backend/cuda/stats_publish.hpp"
#include "codegen/cuda_expr_source.hpp"
#include "codegen/cuda_step_kernel_source.hpp"
#include "flexkit/cuda.hpp"

namespace flexkit::backend::cuda {
namespace {

using codegen::ExprStats;

// Room for every flex16 output one launch can have.
constexpr std::size_t kBatchRecords = codegen::kStepMaxSlots;
static_assert(kBatchRecords <= 32, "the publish kernel takes a record a thread, in one warp");
static_assert(sizeof(ExprStats) == 32, "the publish kernel takes four 8-byte words a record");

// One launch's records: device records (zero whenever the batch is free), the mapped pinned host
// memory the publish writes into, and the event behind the publish. Reused from launch to launch
// (pinned allocations and events cost far more than a small kernel); handed out again only once
// its event has completed.
struct Batch {
  ExprStats* records = nullptr;         // device memory
  ExprStats* host = nullptr;            // pinned, mapped
  ExprStats* host_on_device = nullptr;  // its address on the device
  cudaEvent_t published = nullptr;
};

class BatchPool {
 public:
  Batch acquire(int device) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::vector<Batch>& free = free_[device];
      for (std::size_t i = 0; i < free.size(); ++i) {
        const cudaError_t status = cudaEventQuery(free[i].published);
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
    auto undo = [&] {  // in reverse order, if a later step fails
      if (batch.published) cudaEventDestroy(batch.published);
      if (batch.records) cudaFree(batch.records);
      if (batch.host) cudaFreeHost(batch.host);
    };
    try {
      constexpr std::size_t bytes = sizeof(ExprStats) * kBatchRecords;
      void* host = nullptr;
      FLEXKIT_CUDA_CHECK(cudaHostAlloc(&host, bytes, cudaHostAllocPortable | cudaHostAllocMapped));
      batch.host = static_cast<ExprStats*>(host);
      void* mapped = nullptr;
      FLEXKIT_CUDA_CHECK(cudaHostGetDevicePointer(&mapped, host, 0));
      batch.host_on_device = static_cast<ExprStats*>(mapped);
      void* records = nullptr;
      FLEXKIT_CUDA_CHECK(cudaMalloc(&records, bytes));
      batch.records = static_cast<ExprStats*>(records);
      ExprStats initial[kBatchRecords] = {};  // zero, each naming its place in host memory
      for (std::size_t i = 0; i < kBatchRecords; ++i) initial[i].host = batch.host_on_device + i;
      FLEXKIT_CUDA_CHECK(cudaMemcpy(records, initial, bytes, cudaMemcpyHostToDevice));
      FLEXKIT_CUDA_CHECK(cudaEventCreateWithFlags(&batch.published, cudaEventDisableTiming));
    } catch (...) {
      undo();
      throw;
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

}  // namespace

struct ExprStatsRecords::Shared {
  int device;
  Batch batch;
  bool reusable = true;  // false: the records may not be zero, the batch is leaked
  Shared(int d, Batch b) : device(d), batch(b) {}
  ~Shared() {
    if (reusable) pool().release(device, batch);
  }
};

namespace {

class PendingExprStats final : public detail::PendingFlex16Stats {
 public:
  PendingExprStats(std::shared_ptr<ExprStatsRecords::Shared> shared, std::size_t index)
      : shared_(std::move(shared)), index_(index) {}
  Flex16Stats wait() override {
    FLEXKIT_CUDA_CHECK(cudaEventSynchronize(shared_->batch.published));
    const ExprStats& r = shared_->batch.host[index_];  // written by the publish the event follows
    Flex16Stats s{};
    s.max_abs_m = r.max_abs_m;
    s.saturated = r.saturated;
    s.nan_count = r.nan_count;
    return s;
  }

 private:
  std::shared_ptr<ExprStatsRecords::Shared> shared_;
  std::size_t index_;
};

void queue_publish(const Batch& batch, std::size_t count, bool published_in_kernel,
                   cudaStream_t stream) {
  if (!published_in_kernel)
    launch_publish_expr_stats(batch.records, batch.host_on_device, static_cast<int>(count), stream);
  FLEXKIT_CUDA_CHECK(cudaEventRecord(batch.published, stream));
}

}  // namespace

ExprStatsRecords::ExprStatsRecords(int device, std::size_t count) : count_(count) {
  if (count > kBatchRecords)
    throw std::logic_error("ExprStatsRecords: more records than one launch can have");
  shared_ = std::make_shared<Shared>(device, pool().acquire(device));
}

ExprStatsRecords::~ExprStatsRecords() {
  if (!shared_) return;
  // Dropped unpublished (an exception on the way): kernels queued so far may still add to the
  // records, so the batch goes back only behind a publish that zeroes them; if even that cannot
  // be queued, it is leaked rather than handed out non-zero.
  try {
    DeviceGuard guard(shared_->device);
    queue_publish(shared_->batch, kBatchRecords, false,
                  static_cast<cudaStream_t>(flexkit::cuda::current_stream(shared_->device)));
  } catch (...) {
    shared_->reusable = false;
  }
}

void* ExprStatsRecords::records() const {
  return shared_->batch.records;
}

std::vector<std::shared_ptr<detail::PendingFlex16Stats>> ExprStatsRecords::publish(
    cudaStream_t stream, bool published_in_kernel) {
  std::shared_ptr<Shared> shared = std::move(shared_);
  try {
    queue_publish(shared->batch, count_, published_in_kernel, stream);
  } catch (...) {
    shared->reusable = false;
    throw;
  }
  std::vector<std::shared_ptr<detail::PendingFlex16Stats>> out;
  for (std::size_t i = 0; i < count_; ++i)
    out.push_back(std::make_shared<PendingExprStats>(shared, i));
  return out;
}

}  // namespace flexkit::backend::cuda
