// The statistics of generated-kernel flex16 writes (expressions, neuron sequences, flex16 copies),
// brought back without waiting. The kernels accumulate into pooled device records that read zero
// whenever they are free; the last block of the generated kernel that commits a record writes it
// into mapped pinned host memory and sets it back to zero (a publish kernel does it after a
// flex16 copy), and an event marks its arrival. So a write needs nothing queued before or after
// it but that event. Each output's storage keeps its pending
// statistics; only a read waits, and by then (an Autoflex manager reads them at the tensor's next
// write) the publish has long arrived.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "core/storage.hpp"

namespace flexkit::backend::cuda {

class ExprStatsRecords {
 public:
  // `count` zeroed codegen::ExprStats records on `device` (at most codegen::kStepMaxSlots), each
  // naming its place in the batch's host memory.
  ExprStatsRecords(int device, std::size_t count);
  ~ExprStatsRecords();
  ExprStatsRecords(const ExprStatsRecords&) = delete;
  ExprStatsRecords& operator=(const ExprStatsRecords&) = delete;

  void* records() const;  // device memory, `count` records

  // Marks the publication behind the work on `stream` (queueing a publish kernel first unless
  // the kernel published the records itself); one pending statistics per record.
  std::vector<std::shared_ptr<detail::PendingFlex16Stats>> publish(cudaStream_t stream,
                                                                   bool published_in_kernel);

  struct Shared;  // the pooled batch (pending_expr_stats.cpp)

 private:
  std::shared_ptr<Shared> shared_;  // null once published
  std::size_t count_;
};

}  // namespace flexkit::backend::cuda
