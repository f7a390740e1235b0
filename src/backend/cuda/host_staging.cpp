// Host-to-device copies that do not wait for the device. A copy from pageable memory must be
// finished before the call returns (the caller may free the source), which makes the host wait
// for everything queued before it. Here the bytes are first copied by the host into one of a few
// pinned buffers, and the device copies from there in stream order; a buffer is written again
// only once the copy queued from it has finished.
#include <cuda_runtime_api.h>

#include <array>
#include <cstring>
#include <map>
#include <mutex>

#include "backend/cuda/check.hpp"
#include "backend/cuda/graph_capture.hpp"
#include "core/strided_ops.hpp"
#include "flexkit/cuda.hpp"

namespace flexkit::backend::cuda {
namespace {

constexpr std::size_t kSlotLimit = std::size_t{16} << 20;  // larger copies wait as before
constexpr int kSlots = 4;  // two batches' images and labels in flight

struct Slot {
  void* host = nullptr;
  std::size_t capacity = 0;
  cudaEvent_t copied = nullptr;
  bool pending = false;
};

struct Ring {
  std::array<Slot, kSlots> slots;
  int next = 0;
};

std::mutex& ring_mutex() {
  static auto* m = new std::mutex;  // never destroyed, as the buffers
  return *m;
}
std::map<int, Ring>& rings() {
  static auto* r = new std::map<int, Ring>;
  return *r;
}

}  // namespace

bool upload_staged(int device, void* dst, const void* src, std::size_t bytes) {
  if (bytes > kSlotLimit) return false;
  if (bytes == 0) return true;
  refuse_in_capture(device, "a copy from host memory");
  auto stream = static_cast<cudaStream_t>(flexkit::cuda::current_stream(device));
  std::lock_guard<std::mutex> lock(ring_mutex());
  DeviceGuard guard(device);
  Ring& ring = rings()[device];
  Slot& slot = ring.slots[ring.next];
  ring.next = (ring.next + 1) % kSlots;
  if (slot.pending) {  // the host is kSlots copies ahead of the device: it waits here
    FLEXKIT_CUDA_CHECK(cudaEventSynchronize(slot.copied));
    slot.pending = false;
  }
  if (slot.capacity < bytes) {
    if (slot.host) FLEXKIT_CUDA_CHECK(cudaFreeHost(slot.host));
    slot.host = nullptr;
    slot.capacity = 0;
    const std::size_t capacity =
        (bytes + (std::size_t{1} << 20) - 1) & ~((std::size_t{1} << 20) - 1);
    FLEXKIT_CUDA_CHECK(cudaHostAlloc(&slot.host, capacity, cudaHostAllocDefault));
    slot.capacity = capacity;
  }
  if (!slot.copied)
    FLEXKIT_CUDA_CHECK(cudaEventCreateWithFlags(&slot.copied, cudaEventDisableTiming));
  std::memcpy(slot.host, src, bytes);
  FLEXKIT_CUDA_CHECK(cudaMemcpyAsync(dst, slot.host, bytes, cudaMemcpyHostToDevice, stream));
  FLEXKIT_CUDA_CHECK(cudaEventRecord(slot.copied, stream));
  slot.pending = true;
  return true;
}

}  // namespace flexkit::backend::cuda
