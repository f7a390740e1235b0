// The statistics record of one exact product on a CUDA device, brought back without waiting:
// the kernels fill a record in device memory, a publish kernel queued behind them (or the last
// block of a call's only kernel) writes it into mapped pinned host memory (and resets it) and an
// event marks its arrival. The output's storage
// keeps the pending record, and only a read of the statistics waits for the event — so back-to-back
// products never stall the host (docs/flex16.md: reading the statistics is cheap; taking them is
// free).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/exact_stats.hpp"

namespace flexkit::backend::cuda {

class DeviceStatsRecord {
 public:
  // A record on `device` that holds gemm_stats_identity() (a pooled one, reset by its last
  // publish), for kernels queued on `stream`.
  DeviceStatsRecord(int device, cudaStream_t stream);
  ~DeviceStatsRecord();
  DeviceStatsRecord(const DeviceStatsRecord&) = delete;
  DeviceStatsRecord& operator=(const DeviceStatsRecord&) = delete;

  portable::GemmStats* device_record() const;

  // For a kernel that is its call's only one and publishes the record itself (commit_block_stats
  // with an arrival counter): the host copy's device address and the counter (at 0). Once such a
  // kernel is queued, published_in_kernel() says so, and finish() queues no publish kernel.
  portable::GemmStats* host_record_on_device() const;
  std::uint32_t* arrivals() const;
  void published_in_kernel() { published_in_kernel_ = true; }

  // Queues the publish after everything queued so far on the stream (unless a kernel did it).
  // wait = true returns the whole record now (a measuring pass needs its range at once);
  // otherwise the record is returned pending.
  gemm::ExactStats finish(bool wait);

 public:
  struct Parts;  // the slot, the device record (pending_stats.cpp)

 private:
  Parts* parts_;  // owned until finish() hands it to the pending record
  cudaStream_t stream_ = nullptr;
  bool published_in_kernel_ = false;
};

}  // namespace flexkit::backend::cuda
