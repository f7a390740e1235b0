#include "core/host_convert.hpp"

#include <cmath>
#include <cstring>

#include "core/storage.hpp"
#include "core/text.hpp"
#include "flexkit/error.hpp"

namespace flexkit::detail {

void check_value_for_dtype(double value, DType dtype, const char* operation) {
  switch (dtype) {
    case DType::f32:
    case DType::f64:
    case DType::bf16:
      return;
    case DType::flex16:
      if (!std::isfinite(value))
        throw ValueError(
            cat(operation, ": ", value, " cannot be stored in flex16 (finite values only)"));
      return;
    case DType::u8:
      if (!(value >= 0 && value <= 255 && value == std::floor(value)))
        throw ValueError(cat(operation, ": ", value, " is not an integer in [0, 255] for u8"));
      return;
    case DType::i32:
      if (!(value >= -2147483648.0 && value <= 2147483647.0 && value == std::floor(value)))
        throw ValueError(cat(operation, ": ", value, " is not an int32 integer for i32"));
      return;
  }
}

std::uint64_t value_bits(double value, DType dtype, int iwl, Flex16Stats* stats) {
  check_value_for_dtype(value, dtype, "value_bits");
  switch (dtype) {
    case DType::f32:
      return portable::float_to_bits(static_cast<float>(value));
    case DType::f64: {
      std::uint64_t b;
      std::memcpy(&b, &value, 8);
      return b;
    }
    case DType::bf16:
      return portable::float_to_bf16_bits(static_cast<float>(value));
    case DType::u8:
      return static_cast<std::uint8_t>(value);
    case DType::i32:
      return static_cast<std::uint32_t>(static_cast<std::int32_t>(value));
    case DType::flex16: {
      portable::Flex16Code c = portable::flex16_encode(value, iwl);
      if (stats) {
        stats->saturated += c.saturated;
        stats->max_abs_m = std::max<int32_t>(stats->max_abs_m, std::abs(int32_t{c.m}));
      }
      return static_cast<std::uint16_t>(c.m);
    }
  }
  return 0;
}

template <class T>
Array array_from_host_values(std::span<const T> values, const Shape& shape, DType dtype,
                             Device device, const Flex16EncodeOptions& options) {
  if (static_cast<std::int64_t>(values.size()) != shape_numel(shape))
    throw ShapeError(cat("from host: ", values.size(), " values cannot fill shape ",
                         shape_str(shape), " (", shape_numel(shape), " elements)"));
  Array host = Array::empty(shape, dtype, Device::cpu());
  void* out = host.data();
  const std::size_t n = values.size();
  switch (dtype) {
    case DType::f32:
      for (std::size_t i = 0; i < n; ++i)
        static_cast<float*>(out)[i] = static_cast<float>(values[i]);
      break;
    case DType::f64:
      for (std::size_t i = 0; i < n; ++i) static_cast<double*>(out)[i] = values[i];
      break;
    case DType::bf16:
      for (std::size_t i = 0; i < n; ++i)
        static_cast<std::uint16_t*>(out)[i] =
            portable::float_to_bf16_bits(static_cast<float>(values[i]));
      break;
    case DType::u8:
    case DType::i32:
      for (std::size_t i = 0; i < n; ++i) {
        check_value_for_dtype(static_cast<double>(values[i]), dtype, "from host");
        if (dtype == DType::u8)
          static_cast<std::uint8_t*>(out)[i] = static_cast<std::uint8_t>(values[i]);
        else
          static_cast<std::int32_t*>(out)[i] = static_cast<std::int32_t>(values[i]);
      }
      break;
    case DType::flex16: {
      Flex16Encoded enc = flex16_encode(values, options);
      if (n) std::memcpy(out, enc.m.data(), n * sizeof(std::int16_t));
      host.set_iwl(enc.iwl);
      ArrayAccess::storage(host).set_stats(enc.stats);
      break;
    }
  }
  return device.is_cpu() ? host : host.copy_to(device);
}

template Array array_from_host_values<float>(std::span<const float>, const Shape&, DType, Device,
                                             const Flex16EncodeOptions&);
template Array array_from_host_values<double>(std::span<const double>, const Shape&, DType, Device,
                                              const Flex16EncodeOptions&);

template <class T>
std::vector<T> decode_host_elements(const void* bytes, std::size_t count, DType dtype, int iwl) {
  std::vector<T> out(count);
  for (std::size_t i = 0; i < count; ++i) {
    switch (dtype) {
      case DType::f32:
        out[i] = static_cast<T>(static_cast<const float*>(bytes)[i]);
        break;
      case DType::f64:
        out[i] = static_cast<T>(static_cast<const double*>(bytes)[i]);
        break;
      case DType::bf16:
        out[i] = static_cast<T>(
            portable::bf16_bits_to_float(static_cast<const std::uint16_t*>(bytes)[i]));
        break;
      case DType::u8:
        out[i] = static_cast<T>(static_cast<const std::uint8_t*>(bytes)[i]);
        break;
      case DType::i32:
        out[i] = static_cast<T>(static_cast<const std::int32_t*>(bytes)[i]);
        break;
      case DType::flex16:
        out[i] = static_cast<T>(
            portable::flex16_decode(static_cast<const std::int16_t*>(bytes)[i], iwl));
        break;
    }
  }
  return out;
}

template std::vector<float> decode_host_elements<float>(const void*, std::size_t, DType, int);
template std::vector<double> decode_host_elements<double>(const void*, std::size_t, DType, int);

}  // namespace flexkit::detail
