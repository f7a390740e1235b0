// Shapes and strides (in elements) of arrays up to rank 8.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace flexkit {

inline constexpr int kMaxRank = 8;

using Shape = std::vector<std::int64_t>;
using Strides = std::vector<std::int64_t>;

std::int64_t shape_numel(const Shape& shape);
// "(3, 4)" — the form NumPy prints, used in every error message.
std::string shape_str(const Shape& shape);
// Row-major strides, in elements.
Strides contiguous_strides(const Shape& shape);
// NumPy broadcasting of two shapes; throws ShapeError naming `operation` and both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* operation);

}  // namespace flexkit
