// Array::str(): values printed the way NumPy prints them, summarised when large.
#include <cstdio>

#include "core/text.hpp"
#include "flexkit/array.hpp"

namespace flexkit {
namespace {

constexpr std::int64_t kSummariseAbove = 1000;  // elements, as NumPy's threshold
constexpr std::int64_t kEdgeItems = 3;

std::string format_value(double v, DType dtype) {
  char buf[64];
  if (dtype == DType::u8 || dtype == DType::i32)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else
    std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

void print_axis(std::string& out, const std::vector<double>& values, const Shape& shape, int axis,
                std::int64_t base, bool summarise, DType dtype, int indent) {
  const int rank = static_cast<int>(shape.size());
  if (rank == 0) {
    out += format_value(values[0], dtype);
    return;
  }
  std::int64_t stride = 1;
  for (int d = axis + 1; d < rank; ++d) stride *= shape[d];
  const std::int64_t n = shape[axis];
  out += "[";
  for (std::int64_t i = 0; i < n; ++i) {
    if (summarise && n > 2 * kEdgeItems && i == kEdgeItems) {
      out += axis + 1 == rank ? "..., " : "...,\n" + std::string(indent + 1, ' ');
      i = n - kEdgeItems - 1;
      continue;
    }
    if (axis + 1 == rank)
      out += format_value(values[base + i], dtype);
    else
      print_axis(out, values, shape, axis + 1, base + i * stride, summarise, dtype, indent + 1);
    if (i + 1 < n) out += axis + 1 == rank ? ", " : ",\n" + std::string(indent + 1, ' ');
  }
  out += "]";
}

}  // namespace

std::string Array::str() const {
  if (!defined()) return "<empty array>";
  std::vector<double> values = to_doubles();
  std::string out;
  print_axis(out, values, shape_, 0, 0, size() > kSummariseAbove, dtype_, 0);
  return out;
}

}  // namespace flexkit
