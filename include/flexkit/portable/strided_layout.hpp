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

// Division of a 32-bit index below 2^31 by a run-time extent d as a multiply-high and a shift,
// the round-up method of Granlund and Montgomery: multiplier = ceil(2^(31 + l) / d) with
// l = ceil(log2 d) (below 2^32), shift = l - 1. Then m·d - 2^(31+l) < d <= 2^l, which makes
// floor(x·m / 2^(31+l)) = floor(x / d) for every x < 2^31. d = 1: multiplier 0, the index itself.
// Generated kernels unravel indices with it: a hardware division is a long instruction sequence.
struct IndexDivider {
  uint32_t multiplier;
  uint32_t shift;
};

FLEXKIT_HD IndexDivider make_index_divider(int64_t d) {
  if (d <= 1) return {0, 0};
  int l = 0;
  while ((int64_t{1} << l) < d) ++l;
  const uint64_t m =
      ((uint64_t{1} << (31 + l)) + static_cast<uint64_t>(d) - 1) / static_cast<uint64_t>(d);
  return {static_cast<uint32_t>(m), static_cast<uint32_t>(l - 1)};
}

FLEXKIT_HD uint32_t divide_index(uint32_t x, IndexDivider divider) {
#if FLEXKIT_DEVICE_PASS
  const uint32_t high = __umulhi(x, divider.multiplier);
#else
  const uint32_t high =
      static_cast<uint32_t>((static_cast<uint64_t>(x) * divider.multiplier) >> 32);
#endif
  return divider.multiplier == 0 ? x : high >> divider.shift;
}

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
