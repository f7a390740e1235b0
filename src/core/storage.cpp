#include "core/storage.hpp"

#include <cstdlib>

#include "backend/device_memory.hpp"
#include "core/text.hpp"
#include "flexkit/error.hpp"

namespace flexkit::detail {

namespace {
constexpr std::size_t kHostAlignment = 64;  // a cache line; also enough for any SIMD load
}

std::shared_ptr<Storage> Storage::allocate(std::size_t bytes, Device device) {
  void* data = nullptr;
  if (bytes > 0) {
    if (device.is_cpu()) {
      std::size_t rounded = (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
      data = std::aligned_alloc(kHostAlignment, rounded);
      if (!data)
        throw OutOfMemoryError(cat("cpu: cannot allocate ", bytes, " bytes of host memory"));
    } else {
      data = backend::cuda::allocate(device.index, bytes);
    }
  }
  try {
    return std::shared_ptr<Storage>(new Storage(data, bytes, device));
  } catch (...) {
    if (device.is_cpu())
      std::free(data);
    else if (data)
      backend::cuda::deallocate(device.index, data);
    throw;
  }
}

Storage::~Storage() {
  if (!data_) return;
  if (device_.is_cpu())
    std::free(data_);
  else
    backend::cuda::deallocate(device_.index, data_);
}

}  // namespace flexkit::detail
