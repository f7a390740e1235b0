#include "backend/cuda/alternating_workspace.hpp"

#include <map>
#include <mutex>
#include <utility>

#include "backend/cuda/check.hpp"
#include "core/device_memory.hpp"

namespace flexkit::backend::cuda {
namespace {

struct Halves {
  unsigned long long* half[2] = {nullptr, nullptr};
  std::size_t capacity_words = 0;  // of each half
  std::size_t dirty_words[2] = {0, 0};
  int next = 0;  // the half the next call adds into
};

std::mutex& halves_mutex() {
  static auto* m = new std::mutex;  // never destroyed: arrays may outlive static destruction
  return *m;
}
std::map<std::pair<int, cudaStream_t>, Halves>& all_halves() {
  static auto* h = new std::map<std::pair<int, cudaStream_t>, Halves>;
  return *h;
}

}  // namespace

AlternatingWorkspace alternating_workspace(int device, cudaStream_t stream, std::size_t words) {
  std::lock_guard<std::mutex> lock(halves_mutex());
  Halves& h = all_halves()[{device, stream}];
  if (h.capacity_words < words || h.half[0] == nullptr) {
    DeviceGuard guard(device);
    // Growing: the calls queued on the old halves finish first (rare: a larger geometry).
    if (h.half[0] != nullptr) {
      FLEXKIT_CUDA_CHECK(cudaStreamSynchronize(stream));
      deallocate(device, h.half[0]);  // both halves: one allocation
      h = {};
    }
    // Rounded up to 64 KiB, so that a few slightly larger geometries do not each grow it; through
    // the caching allocator, so that an out-of-memory there releases its cached blocks, retries
    // and then reports what flexkit holds, these halves included.
    const std::size_t bytes = (words * sizeof(unsigned long long) + 65535) & ~std::size_t(65535);
    void* both = allocate(device, 2 * bytes);
    const cudaError_t zeroed = cudaMemsetAsync(both, 0, 2 * bytes, stream);
    if (zeroed != cudaSuccess) {
      deallocate(device, both);
      FLEXKIT_CUDA_CHECK(zeroed);
    }
    h.half[0] = static_cast<unsigned long long*>(both);
    h.half[1] = h.half[0] + bytes / sizeof(unsigned long long);
    h.capacity_words = bytes / sizeof(unsigned long long);
  }
  const int use = h.next, other = 1 - use;
  const AlternatingWorkspace w{h.half[use], h.half[other],
                               (h.dirty_words[other] + 1) & ~std::size_t(1)};
  h.dirty_words[other] = 0;  // this call's finishing pass clears it
  h.dirty_words[use] = words;
  h.next = other;
  return w;
}

}  // namespace flexkit::backend::cuda
