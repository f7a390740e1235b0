// The memory behind one or more Array views, and the per-tensor flex16 metadata they share.
#pragma once
#include <cstddef>
#include <memory>

#include "flexkit/array.hpp"
#include "flexkit/device.hpp"
#include "flexkit/flex16.hpp"
#include "flexkit/portable/strided_layout.hpp"

namespace flexkit::detail {

class Storage {
 public:
  // Throws OutOfMemoryError / CudaError / DeviceError; never returns a half-made storage.
  static std::shared_ptr<Storage> allocate(std::size_t bytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

  int iwl = 0;             // flex16 exponent shared by every view
  Flex16Stats stats = {};  // what the last flex16 write recorded

 private:
  Storage(void* data, std::size_t bytes, Device device)
      : data_(data), bytes_(bytes), device_(device) {}
  void* data_;
  std::size_t bytes_;
  Device device_;
};

}  // namespace flexkit::detail

namespace flexkit {

// Internal access to an Array's parts, for backends and I/O.
struct ArrayAccess {
  static Array make(std::shared_ptr<detail::Storage> storage, DType dtype, Shape shape,
                    Strides strides, std::int64_t offset, bool writable) {
    return Array(std::move(storage), dtype, std::move(shape), std::move(strides), offset, writable);
  }
  static detail::Storage& storage(const Array& a) { return *a.storage_; }
  static portable::StridedLayout layout(const Array& a);
};

}  // namespace flexkit
