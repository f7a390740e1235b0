// Moving elements: host I/O, copies between devices, assign and fill.
#include <cstring>

#include "core/host_convert.hpp"
#include "core/storage.hpp"
#include "core/strided_ops.hpp"
#include "core/text.hpp"
#include "core/upload.hpp"
#include "flexkit/array.hpp"
#include "flexkit/error.hpp"

namespace flexkit {

using detail::cat;

namespace {

template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>)
    return DType::f32;
  else if constexpr (std::is_same_v<T, double>)
    return DType::f64;
  else if constexpr (std::is_same_v<T, std::int16_t>)
    return DType::flex16;
  else if constexpr (std::is_same_v<T, BF16>)
    return DType::bf16;
  else if constexpr (std::is_same_v<T, std::uint8_t>)
    return DType::u8;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return DType::i32;
  else
    static_assert(sizeof(T) == 0, "no dtype holds this host type");
}

template <class T>
constexpr const char* host_type_name() {
  if constexpr (std::is_same_v<T, float>)
    return "float";
  else if constexpr (std::is_same_v<T, double>)
    return "double";
  else if constexpr (std::is_same_v<T, std::int16_t>)
    return "int16_t";
  else if constexpr (std::is_same_v<T, BF16>)
    return "BF16";
  else if constexpr (std::is_same_v<T, std::uint8_t>)
    return "uint8_t";
  else
    return "int32_t";
}

void copy_bytes(Device dst_device, void* dst, Device src_device, const void* src,
                std::size_t bytes) {
  if (bytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu())
    std::memcpy(dst, src, bytes);
  else
    backend::cuda::memcpy_bytes(dst_device, dst, src_device, src, bytes);
}

backend::StridedDst dst_of(const Array& a) {
  return {ArrayAccess::layout(a), a.data()};
}
backend::StridedSrc src_of(const Array& a) {
  return {ArrayAccess::layout(a), a.data()};
}

Flex16Stats max_abs_stats(const std::int16_t* m, std::size_t n) {
  Flex16Stats s{};
  for (std::size_t i = 0; i < n; ++i)
    s.max_abs_m = std::max<int32_t>(s.max_abs_m, std::abs(int32_t{m[i]}));
  return s;
}

}  // namespace

Array Array::copy_to(Device target) const {
  require_defined("copy_to");
  if (dtype_ == DType::f64 && target.is_cuda())
    throw DTypeError(cat("copy_to: ", describe(), " cannot move to ", target.str(),
                         ": f64 arrays live on the cpu only"));
  Array src = contiguous();
  Array out = empty(shape_, dtype_, target);
  if (dtype_ == DType::flex16) {
    out.storage_->iwl = storage_->iwl;
    out.storage_->set_stats(storage_->stats());
  }
  copy_bytes(target, out.data(), device(), src.data(), nbytes());
  return out;
}

Array detail::upload_without_waiting(const Array& host, Device device) {
  if (host.defined() && host.device().is_cpu() && device.is_cpu()) return host.contiguous();
  if (!host.defined() || !host.device().is_cpu() || !device.is_cuda() ||
      host.dtype() == DType::flex16 || host.dtype() == DType::f64)
    return host.copy_to(device);
  const Array src = host.contiguous();
  Array out = Array::empty(host.shape(), host.dtype(), device);
  if (!backend::cuda::upload_staged(device.index, out.data(), src.data(), src.nbytes()))
    return host.copy_to(device);
  return out;
}

Array Array::contiguous() const {
  require_defined("contiguous");
  return is_contiguous() ? *this : clone();
}

Array Array::clone() const {
  require_defined("clone");
  Array out = empty(shape_, dtype_, device());
  if (dtype_ == DType::flex16) out.storage_->iwl = storage_->iwl;
  out.assign(*this);
  return out;
}

void Array::assign(const Array& source) {
  require_writable("assign");
  source.require_defined("assign");
  if (source.dtype_ != dtype_)
    throw DTypeError(cat("assign: source ", source.describe(), " does not have the dtype of ",
                         "destination ", describe(), "; convert with an expression"));
  Shape joint = broadcast_shapes(source.shape_, shape_, "assign");
  if (joint != shape_)
    throw ShapeError(cat("assign: source ", source.describe(), " does not broadcast to ",
                         "destination ", describe()));
  Array src = source;
  // Between devices, contiguous same-shape operands move in one transfer, with no staging copy
  // (flex16 goes through its kernel, which records the write's statistics).
  if (src.device() != device() && dtype_ != DType::flex16 && src.shape_ == shape_ &&
      src.is_contiguous() && is_contiguous()) {
    copy_bytes(device(), data(), src.device(), src.data(), nbytes());
    return;
  }
  if (src.device() != device())
    src = src.copy_to(device());
  else if (shares_storage(src))
    src = src.clone();  // overlapping views: read a snapshot
  src = src.broadcast_to(shape_);
  if (size() == 0) {
    if (dtype_ == DType::flex16) storage_->set_stats({});
    return;
  }
  const Device dev = device();
  if (dtype_ == DType::flex16) {
    if (dev.is_cpu()) {
      storage_->set_stats(backend::cpu::flex16_copy(dst_of(*this), src_of(src), src.iwl(), iwl()));
    } else if (auto pending = backend::cuda::flex16_copy(dev.index, dst_of(*this), src_of(src),
                                                         src.iwl(), iwl())) {
      storage_->set_pending_stats(std::move(pending));
    } else {
      storage_->set_stats({});
    }
  } else if (dev.is_cpu()) {
    backend::cpu::copy(dst_of(*this), src_of(src), itemsize(dtype_));
  } else {
    backend::cuda::copy(dev.index, dst_of(*this), src_of(src), itemsize(dtype_));
  }
}

void Array::fill(double value) {
  require_writable("fill");
  detail::check_value_for_dtype(value, dtype_, "fill");
  Flex16Stats stats{};
  std::uint64_t bits =
      detail::value_bits(value, dtype_, dtype_ == DType::flex16 ? storage_->iwl : 0, &stats);
  if (size() > 0) {
    if (device().is_cpu())
      backend::cpu::fill(dst_of(*this), bits, itemsize(dtype_));
    else
      backend::cuda::fill(device().index, dst_of(*this), bits, itemsize(dtype_));
  }
  if (dtype_ == DType::flex16) {
    stats.saturated *= static_cast<std::uint64_t>(size());
    storage_->set_stats(size() > 0 ? stats : Flex16Stats{});
  }
}

// ---- host I/O ------------------------------------------------------------------------------

// (Element, not T: inside Array's scope T names the transpose.)
template <class Element>
Array Array::from_span(std::span<const Element> data, const Shape& shape, Device device) {
  using T = Element;
  static_assert(!std::is_same_v<T, std::int16_t>, "flex16 mantissas need an iwl: from_flex16");
  constexpr DType dtype = dtype_of<T>();
  if (static_cast<std::int64_t>(data.size()) != shape_numel(shape))
    throw ShapeError(cat("from_span: ", data.size(), " ", host_type_name<T>(),
                         " values cannot fill shape ", shape_str(shape), " (", shape_numel(shape),
                         " elements)"));
  Array host = empty(shape, dtype, Device::cpu());
  if (!data.empty()) std::memcpy(host.data(), data.data(), data.size() * sizeof(T));
  return device.is_cpu() ? host : host.copy_to(device);
}

Array Array::from_floats(std::span<const float> data, const Shape& shape, DType dtype,
                         Device device, const Flex16EncodeOptions& options) {
  return detail::array_from_host_values<float>(data, shape, dtype, device, options);
}

Array Array::from_flex16(std::span<const std::int16_t> mantissas, int iwl, const Shape& shape,
                         Device device) {
  check_iwl(iwl, "from_flex16");
  if (static_cast<std::int64_t>(mantissas.size()) != shape_numel(shape))
    throw ShapeError(cat("from_flex16: ", mantissas.size(), " mantissas cannot fill shape ",
                         shape_str(shape), " (", shape_numel(shape), " elements)"));
  Array host = empty(shape, DType::flex16, Device::cpu());
  if (!mantissas.empty()) std::memcpy(host.data(), mantissas.data(), mantissas.size() * 2);
  host.storage_->iwl = iwl;
  host.storage_->set_stats(max_abs_stats(mantissas.data(), mantissas.size()));
  return device.is_cpu() ? host : host.copy_to(device);
}

template <class Element>
std::vector<Element> Array::to_vector() const {
  using T = Element;
  require_defined("to_vector");
  if (dtype_ != dtype_of<T>())
    throw DTypeError(cat("to_vector<", host_type_name<T>(), ">: ", describe(), " holds ",
                         dtype_name(dtype_), ", not ", dtype_name(dtype_of<T>())));
  Array host = device().is_cpu() ? contiguous() : copy_to(Device::cpu());
  std::vector<T> out(static_cast<std::size_t>(size()));
  if (!out.empty()) std::memcpy(out.data(), host.data(), out.size() * sizeof(T));
  return out;
}

std::vector<float> Array::to_floats() const {
  require_defined("to_floats");
  Array host = device().is_cpu() ? contiguous() : copy_to(Device::cpu());
  return detail::decode_host_elements<float>(host.data(), static_cast<std::size_t>(size()), dtype_,
                                             dtype_ == DType::flex16 ? iwl() : 0);
}

std::vector<double> Array::to_doubles() const {
  require_defined("to_doubles");
  Array host = device().is_cpu() ? contiguous() : copy_to(Device::cpu());
  return detail::decode_host_elements<double>(host.data(), static_cast<std::size_t>(size()), dtype_,
                                              dtype_ == DType::flex16 ? iwl() : 0);
}

template <class Element>
void Array::copy_from(std::span<const Element> data) {
  using T = Element;
  require_writable("copy_from");
  if (dtype_ != dtype_of<T>())
    throw DTypeError(cat("copy_from<", host_type_name<T>(), ">: ", describe(), " holds ",
                         dtype_name(dtype_), ", not ", dtype_name(dtype_of<T>())));
  if (static_cast<std::int64_t>(data.size()) != size())
    throw ShapeError(
        cat("copy_from: ", data.size(), " values for ", describe(), " (", size(), " elements)"));
  Array host = empty(shape_, dtype_, Device::cpu());
  if (!data.empty()) std::memcpy(host.data(), data.data(), data.size() * sizeof(T));
  if (dtype_ == DType::flex16) host.storage_->iwl = storage_->iwl;
  assign(host);
}

void Array::assign_floats(std::span<const float> data) {
  require_writable("assign_floats");
  if (static_cast<std::int64_t>(data.size()) != size())
    throw ShapeError(cat("assign_floats: ", data.size(), " values for ", describe(), " (", size(),
                         " elements)"));
  Flex16EncodeOptions options;
  if (dtype_ == DType::flex16) options.iwl = storage_->iwl;
  Array host = detail::array_from_host_values<float>(data, shape_, dtype_, Device::cpu(), options);
  assign(host);
  if (dtype_ == DType::flex16) storage_->set_stats(host.storage_->stats());
}

#define FLEXKIT_HOST_IO(E)                             \
  template std::vector<E> Array::to_vector<E>() const; \
  template void Array::copy_from<E>(std::span<const E>);
FLEXKIT_HOST_IO(float)
FLEXKIT_HOST_IO(double)
FLEXKIT_HOST_IO(std::int16_t)
FLEXKIT_HOST_IO(BF16)
FLEXKIT_HOST_IO(std::uint8_t)
FLEXKIT_HOST_IO(std::int32_t)
#undef FLEXKIT_HOST_IO

template Array Array::from_span<float>(std::span<const float>, const Shape&, Device);
template Array Array::from_span<double>(std::span<const double>, const Shape&, Device);
template Array Array::from_span<BF16>(std::span<const BF16>, const Shape&, Device);
template Array Array::from_span<std::uint8_t>(std::span<const std::uint8_t>, const Shape&, Device);
template Array Array::from_span<std::int32_t>(std::span<const std::int32_t>, const Shape&, Device);

}  // namespace flexkit
