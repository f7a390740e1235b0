// Device memory for array storage: declared here because Storage allocates through it, defined
// by the CUDA backend's caching allocator (backend/cuda/caching_allocator.cpp; without CUDA,
// backend/cuda_unavailable.cpp refuses every request).
#pragma once
#include <cstddef>

namespace flexkit::backend::cuda {

// Throws OutOfMemoryError naming the request and what is held, DeviceError for a bad index.
void* allocate(int device, std::size_t bytes);
void deallocate(int device, void* ptr) noexcept;

}  // namespace flexkit::backend::cuda
