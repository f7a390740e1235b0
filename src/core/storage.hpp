// The memory behind one or more Array views, and the per-tensor flex16 metadata they share.
#pragma once
#include <cstddef>
#include <memory>
#include <optional>
#include <string_view>

#include "flexkit/array.hpp"
#include "flexkit/autoflex.hpp"
#include "flexkit/device.hpp"
#include "flexkit/flex16.hpp"
#include "flexkit/portable/strided_layout.hpp"

namespace flexkit::detail {

// Statistics of a flex16 write that a device may still be computing: a backend hands one to the
// output's storage instead of waiting, and the first read of the statistics waits for it.
class PendingFlex16Stats {
 public:
  virtual ~PendingFlex16Stats() = default;
  virtual Flex16Stats wait() = 0;  // throws what the device reports (e.g. CudaError)
};

class Storage {
 public:
  // Throws OutOfMemoryError / CudaError / DeviceError; never returns a half-made storage. `what`
  // names the request in an out-of-memory message (e.g. "f32 (2, 3)"). A host request larger than
  // memory and swap together is refused at once.
  static std::shared_ptr<Storage> allocate(std::size_t bytes, Device device,
                                           std::string_view what = {});
  // Memory flexkit does not own (another library's tensor): `owner` keeps it alive and is
  // released when the last view goes; nothing is freed here.
  static std::shared_ptr<Storage> wrap(void* data, std::size_t bytes, Device device,
                                       std::shared_ptr<void> owner);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

  int iwl = 0;                       // flex16 exponent shared by every view
  std::optional<Autoflex> autoflex;  // made by the first write under IwlPolicy::autoflex

  // What the last flex16 write recorded; waits for it when a device is still computing it.
  Flex16Stats stats() {
    if (pending_stats_) {
      stats_ = pending_stats_->wait();
      pending_stats_.reset();
    }
    return stats_;
  }
  void set_stats(const Flex16Stats& stats) {
    stats_ = stats;
    pending_stats_.reset();
  }
  void set_pending_stats(std::shared_ptr<PendingFlex16Stats> pending) {
    pending_stats_ = std::move(pending);
  }
  // The statistics a device is still bringing back (null once taken, or on the host).
  const std::shared_ptr<PendingFlex16Stats>& pending_stats() const { return pending_stats_; }

 private:
  Flex16Stats stats_ = {};
  std::shared_ptr<PendingFlex16Stats> pending_stats_;
  Storage(void* data, std::size_t bytes, Device device)
      : data_(data), bytes_(bytes), device_(device) {}
  void* data_;
  std::size_t bytes_;
  Device device_;
  std::shared_ptr<void> external_owner_;
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
  static const std::shared_ptr<detail::Storage>& storage_ptr(const Array& a) { return a.storage_; }
  static portable::StridedLayout layout(const Array& a);
};

}  // namespace flexkit
