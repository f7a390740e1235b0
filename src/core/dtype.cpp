#include "flexkit/dtype.hpp"

#include "core/text.hpp"
#include "flexkit/error.hpp"

namespace flexkit {

std::size_t itemsize(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 4;
    case DType::f64:
      return 8;
    case DType::flex16:
      return 2;
    case DType::bf16:
      return 2;
    case DType::u8:
      return 1;
    case DType::i32:
      return 4;
  }
  throw DTypeError("itemsize: unknown dtype value");
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::f64:
      return "f64";
    case DType::flex16:
      return "flex16";
    case DType::bf16:
      return "bf16";
    case DType::u8:
      return "u8";
    case DType::i32:
      return "i32";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  if (name == "f32" || name == "float32") return DType::f32;
  if (name == "f64" || name == "float64") return DType::f64;
  if (name == "flex16") return DType::flex16;
  if (name == "bf16" || name == "bfloat16") return DType::bf16;
  if (name == "u8" || name == "uint8") return DType::u8;
  if (name == "i32" || name == "int32") return DType::i32;
  throw DTypeError(detail::cat("parse_dtype: unknown dtype '", name,
                               "'; expected one of f32, f64, flex16, bf16, u8, i32"));
}

}  // namespace flexkit
