// What the rest of the CUDA backend needs to know of graph capture (flexkit::cuda::CapturedGraph):
// whether this thread is capturing on a device, and the allocator's pools that keep a graph's
// memory its own.
#pragma once
#include <cstdint>

namespace flexkit::backend::cuda {

// The pool of the capture this thread runs on `device`; 0 when it runs none.
std::uint64_t capture_pool(int device) noexcept;
inline bool capturing(int device) noexcept {
  return capture_pool(device) != 0;
}
// Throws UnsupportedError when this thread is capturing on `device`: `what` (e.g. "copying
// from host memory") has effects a replay would not repeat, or waits for the device.
void refuse_in_capture(int device, const char* what);

// The caching allocator's side (caching_allocator.cpp).
std::uint64_t new_memory_pool(int device);
void release_memory_pool(int device, std::uint64_t pool) noexcept;

}  // namespace flexkit::backend::cuda
