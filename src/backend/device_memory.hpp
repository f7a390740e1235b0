// Device memory for array storage, through the CUDA caching allocator (stubs without CUDA).
#pragma once
#include <cstddef>

namespace flexkit::backend::cuda {

// Throws OutOfMemoryError naming the request and what is held, DeviceError for a bad index.
void* allocate(int device, std::size_t bytes);
void deallocate(int device, void* ptr) noexcept;

}  // namespace flexkit::backend::cuda
