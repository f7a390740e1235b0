#include "core/storage.hpp"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>

#include "core/device_memory.hpp"
#include "core/text.hpp"
#include "flexkit/error.hpp"

namespace flexkit::detail {

namespace {
constexpr std::size_t kHostAlignment = 64;  // a cache line; also enough for any SIMD load

// Physical memory and swap, in bytes (0 where the system does not say).
struct HostMemory {
  std::size_t physical = 0;
  std::size_t swap = 0;
};

HostMemory host_memory() {
  HostMemory m;
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  if (pages > 0 && page_size > 0)
    m.physical = static_cast<std::size_t>(pages) * static_cast<std::size_t>(page_size);
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  std::size_t kib = 0;
  while (meminfo >> key >> kib) {
    std::getline(meminfo, unit);
    if (key == "SwapTotal:") {
      m.swap = kib * 1024;
      break;
    }
  }
  return m;
}

[[noreturn]] void host_out_of_memory(std::size_t bytes, std::string_view what,
                                     const HostMemory& memory) {
  throw OutOfMemoryError(cat("cpu: cannot allocate ", human_bytes(double(bytes)), " (", bytes,
                             " bytes) of host memory", what.empty() ? "" : " for ", what,
                             "; the machine has ", human_bytes(double(memory.physical)),
                             " of memory and ", human_bytes(double(memory.swap)), " of swap"));
}

void* allocate_host(std::size_t bytes, std::string_view what) {
  // A request beyond memory and swap together can never be met. Refuse it before the kernel is
  // asked: with overcommit the allocation itself succeeds and the failure comes only after
  // seconds of page faults, or never as an exception at all.
  static const HostMemory memory = host_memory();  // read once: this runs on every allocation
  if (memory.physical > 0 && bytes > memory.physical + memory.swap)
    host_out_of_memory(bytes, what, memory);
  if (bytes > std::numeric_limits<std::size_t>::max() - kHostAlignment)
    host_out_of_memory(bytes, what, memory);
  const std::size_t rounded = (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
  void* data = std::aligned_alloc(kHostAlignment, rounded);
  if (!data) host_out_of_memory(bytes, what, memory);
  return data;
}

}  // namespace

std::shared_ptr<Storage> Storage::allocate(std::size_t bytes, Device device,
                                           std::string_view what) {
  void* data = nullptr;
  if (bytes > 0) {
    if (device.is_cpu())
      data = allocate_host(bytes, what);
    else
      data = backend::cuda::allocate(device.index, bytes);
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

std::shared_ptr<Storage> Storage::wrap(void* data, std::size_t bytes, Device device,
                                       std::shared_ptr<void> owner) {
  auto storage = std::shared_ptr<Storage>(new Storage(data, bytes, device));
  storage->external_owner_ = std::move(owner);
  return storage;
}

Storage::~Storage() {
  if (external_owner_) return;  // the owner's destructor releases the memory
  if (!data_) return;
  if (device_.is_cpu())
    std::free(data_);
  else
    backend::cuda::deallocate(device_.index, data_);
}

}  // namespace flexkit::detail
