// A view's shape and strides as one fixed-size POD, passed by value to kernels on every backend.
#pragma once
#include "flexkit/portable/config.hpp"

namespace flexkit::portable {
FLEXKIT_INT_TYPES

inline constexpr int kLayoutMaxRank = 8;

struct StridedLayout {
  int32_t rank;
  int64_t shape[kLayoutMaxRank];
  int64_t strides[kLayoutMaxRank];  // in elements; 0 on broadcast axes
};

// Element offset of the `linear`-th element in row-major order of the view. Index is the type
// the divisions run in: uint32_t when the element count allows (much cheaper on GPUs), else
// int64_t.
template <class Index = int64_t>
FLEXKIT_HD int64_t layout_offset(const StridedLayout& layout, Index linear) {
  int64_t offset = 0;
  for (int d = layout.rank - 1; d >= 0; --d) {
    Index extent = static_cast<Index>(layout.shape[d]);
    Index i = linear % extent;
    linear /= extent;
    offset += static_cast<int64_t>(i) * layout.strides[d];
  }
  return offset;
}

// Merges adjacent axes that are contiguous with each other in every operand and drops size-1
// axes, so kernels divide as little as possible. Operands must share one shape.
FLEXKIT_HD void coalesce_layouts(StridedLayout* layouts, int count) {
  StridedLayout& first = layouts[0];
  int out = 0;
  for (int d = 0; d < first.rank; ++d) {
    if (first.shape[d] == 1) continue;
    bool merge = out > 0;
    for (int k = 0; k < count && merge; ++k)
      merge = layouts[k].strides[out - 1] == layouts[k].strides[d] * layouts[k].shape[d];
    for (int k = 0; k < count; ++k) {
      if (merge) {
        layouts[k].shape[out - 1] *= layouts[k].shape[d];
        layouts[k].strides[out - 1] = layouts[k].strides[d];
      } else {
        layouts[k].shape[out] = layouts[k].shape[d];
        layouts[k].strides[out] = layouts[k].strides[d];
      }
    }
    if (!merge) ++out;
  }
  for (int k = 0; k < count; ++k) layouts[k].rank = out;
}

}  // namespace flexkit::portable
