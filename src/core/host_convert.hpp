// Converting host numbers to and from the bytes of each dtype.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "flexkit/array.hpp"

namespace flexkit::detail {

// Throws ValueError when `value` cannot be stored in `dtype` (NaN/inf into flex16, u8, i32;
// non-integral or out-of-range into u8/i32).
void check_value_for_dtype(double value, DType dtype, const char* operation);

// The element bits of `value` in `dtype` (flex16 at `iwl`, counting saturation into *stats).
std::uint64_t value_bits(double value, DType dtype, int iwl, Flex16Stats* stats);

// Host values (float or double) converted to a new array of `dtype` on `device`. flex16 encodes
// as `options` says (iwl chosen from the data unless given).
template <class T>
Array array_from_host_values(std::span<const T> values, const Shape& shape, DType dtype,
                             Device device, const Flex16EncodeOptions& options);

inline Array array_from_doubles(std::span<const double> values, const Shape& shape, DType dtype,
                                Device device, const Flex16EncodeOptions& options) {
  return array_from_host_values<double>(values, shape, dtype, device, options);
}

// Contiguous host elements of `dtype` decoded to T (float or double).
template <class T>
std::vector<T> decode_host_elements(const void* bytes, std::size_t count, DType dtype, int iwl);

}  // namespace flexkit::detail
