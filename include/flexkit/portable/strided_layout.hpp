// A view's shape and strides as one fixed-size POD, passed by value to kernels on every backend.
#pragma once
#include "config.hpp"

namespace flexkit::portable {
FLEXKIT_INT_TYPES

inline constexpr int kLayoutMaxRank = 8;

struct StridedLayout {
  int32_t rank;
  int64_t shape[kLayoutMaxRank];
  int64_t strides[kLayoutMaxRank];  // in elements; 0 on broadcast axes
};

// Element offset of the `linear`-th element in row-major order of the view.
FLEXKIT_HD int64_t layout_offset(const StridedLayout& layout, int64_t linear) {
  int64_t offset = 0;
  for (int d = layout.rank - 1; d >= 0; --d) {
    int64_t extent = layout.shape[d];
    int64_t i = linear % extent;
    linear /= extent;
    offset += i * layout.strides[d];
  }
  return offset;
}

}  // namespace flexkit::portable
