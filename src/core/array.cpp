// Array construction, properties and factories.
#include "flexkit/array.hpp"

#include <cmath>

#include "core/host_convert.hpp"
#include "core/storage.hpp"
#include "core/text.hpp"
#include "flexkit/error.hpp"

namespace flexkit {

using detail::cat;

Array::Array(std::shared_ptr<detail::Storage> storage, DType dtype, Shape shape, Strides strides,
             std::int64_t offset, bool writable)
    : storage_(std::move(storage)),
      dtype_(dtype),
      shape_(std::move(shape)),
      strides_(std::move(strides)),
      offset_(offset),
      writable_(writable) {}

void Array::require_defined(const char* operation) const {
  if (!storage_) throw ValueError(cat(operation, ": the array is empty (default-constructed)"));
}

void Array::require_writable(const char* operation) const {
  require_defined(operation);
  if (!writable_)
    throw ValueError(cat(operation, ": ", describe(),
                         " is a read-only view (broadcast_to); write to its source instead"));
}

Device Array::device() const {
  require_defined("device");
  return storage_->device();
}

std::int64_t Array::size() const {
  return shape_numel(shape_);
}

std::int64_t Array::dim(int axis) const {
  int r = rank();
  if (axis < -r || axis >= r)
    throw IndexError(cat("dim: axis ", axis, " is out of range for ", describe()));
  return shape_[axis < 0 ? axis + r : axis];
}

bool Array::is_contiguous() const {
  std::int64_t expected = 1;
  for (int d = rank() - 1; d >= 0; --d) {
    if (shape_[d] == 0) return true;
    if (shape_[d] != 1 && strides_[d] != expected) return false;
    expected *= shape_[d];
  }
  return true;
}

void* Array::data() const {
  require_defined("data");
  auto* base = static_cast<char*>(storage_->data());
  return base ? base + offset_ * static_cast<std::int64_t>(itemsize(dtype_)) : nullptr;
}

int Array::iwl() const {
  require_defined("iwl");
  if (dtype_ != DType::flex16)
    throw DTypeError(cat("iwl: ", describe(), " is not flex16; only flex16 has an iwl"));
  return storage_->iwl;
}

void Array::set_iwl(int iwl) {
  require_defined("set_iwl");
  if (dtype_ != DType::flex16)
    throw DTypeError(cat("set_iwl: ", describe(), " is not flex16; only flex16 has an iwl"));
  check_iwl(iwl, "set_iwl");
  storage_->iwl = iwl;
}

Flex16Stats Array::stats() const {
  iwl();  // same checks
  return storage_->stats();
}

Autoflex Array::autoflex() const {
  iwl();  // same checks
  if (!storage_->autoflex) storage_->autoflex.emplace();
  return *storage_->autoflex;
}

void Array::set_autoflex(const Autoflex& manager) {
  iwl();  // same checks
  storage_->autoflex = manager;
}

bool Array::shares_storage(const Array& other) const {
  return storage_ && storage_ == other.storage_;
}

std::string Array::describe() const {
  if (!storage_) return "<empty array>";
  std::string s = cat(dtype_name(dtype_), "[");
  for (int i = 0; i < rank(); ++i) s += cat(i ? ", " : "", shape_[i]);
  s += "]";
  if (!is_contiguous()) s += cat(" strides ", shape_str(strides_));
  if (dtype_ == DType::flex16) s += cat(" iwl ", storage_->iwl);
  return s + " " + storage_->device().str();
}

portable::StridedLayout ArrayAccess::layout(const Array& a) {
  portable::StridedLayout l{};
  l.rank = a.rank();
  for (int d = 0; d < a.rank(); ++d) {
    l.shape[d] = a.shape()[d];
    l.strides[d] = a.strides()[d];
  }
  return l;
}

// ---- factories -----------------------------------------------------------------------------

namespace {

void check_shape(const Shape& shape, const char* operation) {
  if (shape.size() > static_cast<std::size_t>(kMaxRank))
    throw ShapeError(cat(operation, ": shape ", shape_str(shape), " has rank ", shape.size(),
                         "; at most ", kMaxRank, " is supported"));
  std::int64_t bytes = 8;  // the widest element: the byte count must fit in 63 bits
  for (auto d : shape) {
    if (d < 0)
      throw ShapeError(cat(operation, ": shape ", shape_str(shape), " has a negative extent"));
    if (__builtin_mul_overflow(bytes, d, &bytes))
      throw ShapeError(cat(operation, ": shape ", shape_str(shape),
                           " has more elements than memory can address"));
  }
}

void check_device(DType dtype, Device device, const char* operation) {
  if (dtype == DType::f64 && device.is_cuda())
    throw DTypeError(
        cat(operation, ": f64 arrays live on the cpu only (asked for ", device.str(), ")"));
}

}  // namespace

Array Array::empty(const Shape& shape, DType dtype, Device device) {
  check_shape(shape, "empty");
  check_device(dtype, device, "empty");
  std::size_t bytes = static_cast<std::size_t>(shape_numel(shape)) * itemsize(dtype);
  return Array(
      detail::Storage::allocate(bytes, device, cat(dtype_name(dtype), " ", shape_str(shape))),
      dtype, shape, contiguous_strides(shape), 0, true);
}

Array Array::from_external(void* data, DType dtype, const Shape& shape, const Strides& strides,
                           Device device, std::shared_ptr<void> owner, bool writable, int iwl) {
  check_shape(shape, "from_external");
  check_device(dtype, device, "from_external");
  if (strides.size() != shape.size())
    throw ShapeError(
        cat("from_external: ", strides.size(), " strides for shape ", shape_str(shape)));
  if (dtype == DType::flex16) check_iwl(iwl, "from_external");
  // The storage starts at the lowest address the view touches, so that negative strides
  // (a reversed view) give a non-negative offset as every flexkit view has.
  const auto item = static_cast<std::int64_t>(itemsize(dtype));
  std::int64_t low = 0, high = 0;
  const bool empty = shape_numel(shape) == 0;
  for (std::size_t i = 0; i < shape.size() && !empty; ++i) {
    const std::int64_t reach = strides[i] * (shape[i] - 1);
    (reach < 0 ? low : high) += reach;
  }
  if (!data && !empty) throw ValueError("from_external: a null pointer for a non-empty array");
  auto* base = static_cast<unsigned char*>(data) + low * item;
  const auto bytes = empty ? 0 : static_cast<std::size_t>((high - low + 1) * item);
  auto storage = detail::Storage::wrap(base, bytes, device, std::move(owner));
  storage->iwl = iwl;
  return Array(std::move(storage), dtype, shape, strides, -low, writable);
}

Array Array::zeros(const Shape& shape, DType dtype, Device device) {
  return full(shape, 0.0, dtype, device);
}

Array Array::ones(const Shape& shape, DType dtype, Device device) {
  return full(shape, 1.0, dtype, device);
}

Array Array::full(const Shape& shape, double value, DType dtype, Device device) {
  check_shape(shape, "full");
  detail::check_value_for_dtype(value, dtype, "full");
  Array a = empty(shape, dtype, device);
  if (dtype == DType::flex16)
    a.set_iwl(portable::flex16_iwl_for_max(static_cast<float>(std::fabs(value))));
  a.fill(value);
  return a;
}

Array Array::arange(double start, double stop, double step, DType dtype, Device device) {
  if (step == 0 || !std::isfinite(step) || !std::isfinite(start) || !std::isfinite(stop))
    throw ValueError(cat("arange: start ", start, ", stop ", stop, ", step ", step,
                         " must be finite with a non-zero step"));
  double count = std::ceil((stop - start) / step);
  std::int64_t n = count > 0 ? static_cast<std::int64_t>(count) : 0;
  std::vector<double> values(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) values[i] = start + static_cast<double>(i) * step;
  return detail::array_from_doubles(values, {n}, dtype, device, {});
}

}  // namespace flexkit
