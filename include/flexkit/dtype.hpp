// Element types an Array can hold.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace flexkit {

enum class DType : std::uint8_t {
  f32,     // IEEE float32
  f64,     // IEEE float64, for host references (CPU only)
  flex16,  // int16 mantissas with one shared exponent (iwl) per tensor
  bf16,    // bfloat16, stored as its 16 raw bits
  u8,      // spikes, masks
  i32,     // labels, indices
};

std::size_t itemsize(DType dtype);
std::string_view dtype_name(DType dtype);
// "f32", "float32", "flex16", ... ; throws DTypeError naming the accepted names.
DType parse_dtype(std::string_view name);

// The raw bits of one bfloat16 value (so host spans of bf16 are distinct from int16 or uint16).
struct BF16 {
  std::uint16_t bits;
  friend bool operator==(BF16, BF16) = default;
};

}  // namespace flexkit
