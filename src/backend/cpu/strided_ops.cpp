// CPU strided copy and fill: an N-d counter over the outer axes, a tight loop over the last.
#include "core/strided_ops.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace flexkit::backend::cpu {
namespace {

// Calls body(dst_offset, src_offset, inner_count, dst_inner_stride, src_inner_stride) for every
// run along the last axis.
template <class Body>
void for_each_row(const StridedLayout& dst, const StridedLayout* src, Body&& body) {
  const int rank = dst.rank;
  if (rank == 0) {
    body(0, 0, 1, 1, 1);
    return;
  }
  for (int d = 0; d < rank; ++d)
    if (dst.shape[d] == 0) return;
  const int64_t inner = dst.shape[rank - 1];
  int64_t counter[portable::kLayoutMaxRank] = {};
  int64_t dst_off = 0, src_off = 0;
  for (;;) {
    body(dst_off, src_off, inner, dst.strides[rank - 1], src ? src->strides[rank - 1] : 0);
    int d = rank - 2;
    for (; d >= 0; --d) {
      ++counter[d];
      dst_off += dst.strides[d];
      if (src) src_off += src->strides[d];
      if (counter[d] < dst.shape[d]) break;
      dst_off -= dst.strides[d] * dst.shape[d];
      if (src) src_off -= src->strides[d] * dst.shape[d];
      counter[d] = 0;
    }
    if (d < 0) return;
  }
}

template <class T>
void copy_typed(const StridedDst& dst, const StridedSrc& src) {
  T* out = static_cast<T*>(dst.base);
  const T* in = static_cast<const T*>(src.base);
  for_each_row(dst.layout, &src.layout,
               [&](int64_t d0, int64_t s0, int64_t n, int64_t ds, int64_t ss) {
                 if (ds == 1 && ss == 1) {
                   std::memcpy(out + d0, in + s0, static_cast<std::size_t>(n) * sizeof(T));
                   return;
                 }
                 for (int64_t i = 0; i < n; ++i) out[d0 + i * ds] = in[s0 + i * ss];
               });
}

template <class T>
void fill_typed(const StridedDst& dst, std::uint64_t pattern) {
  T value;
  std::memcpy(&value, &pattern, sizeof(T));  // little-endian: the low bytes
  T* out = static_cast<T*>(dst.base);
  for_each_row(dst.layout, nullptr, [&](int64_t d0, int64_t, int64_t n, int64_t ds, int64_t) {
    for (int64_t i = 0; i < n; ++i) out[d0 + i * ds] = value;
  });
}

}  // namespace

// Fewer, longer axes: longer inner runs and memcpy where both sides are contiguous.
std::pair<StridedDst, StridedSrc> coalesced(const StridedDst& dst, const StridedSrc& src) {
  StridedLayout layouts[2] = {dst.layout, src.layout};
  portable::coalesce_layouts(layouts, 2);
  return {StridedDst{layouts[0], dst.base}, StridedSrc{layouts[1], src.base}};
}

void copy(const StridedDst& dst_in, const StridedSrc& src_in, std::size_t elem_size) {
  auto [dst, src] = coalesced(dst_in, src_in);
  switch (elem_size) {
    case 1:
      return copy_typed<std::uint8_t>(dst, src);
    case 2:
      return copy_typed<std::uint16_t>(dst, src);
    case 4:
      return copy_typed<std::uint32_t>(dst, src);
    case 8:
      return copy_typed<std::uint64_t>(dst, src);
    default:
      std::abort();  // dtypes have these sizes only
  }
}

Flex16Stats flex16_copy(const StridedDst& dst_in, const StridedSrc& src_in, int src_iwl,
                        int dst_iwl) {
  auto [dst, src] = coalesced(dst_in, src_in);
  Flex16Stats stats{};
  auto* out = static_cast<std::int16_t*>(dst.base);
  const auto* in = static_cast<const std::int16_t*>(src.base);
  for_each_row(
      dst.layout, &src.layout, [&](int64_t d0, int64_t s0, int64_t n, int64_t ds, int64_t ss) {
        for (int64_t i = 0; i < n; ++i) {
          portable::Flex16Code c = portable::flex16_rescale(in[s0 + i * ss], src_iwl, dst_iwl);
          out[d0 + i * ds] = c.m;
          stats.saturated += c.saturated;
          stats.max_abs_m = std::max<int32_t>(stats.max_abs_m, std::abs(int32_t{c.m}));
        }
      });
  return stats;
}

void fill(const StridedDst& dst_in, std::uint64_t pattern, std::size_t elem_size) {
  StridedDst dst = dst_in;
  portable::coalesce_layouts(&dst.layout, 1);
  switch (elem_size) {
    case 1:
      return fill_typed<std::uint8_t>(dst, pattern);
    case 2:
      return fill_typed<std::uint16_t>(dst, pattern);
    case 4:
      return fill_typed<std::uint32_t>(dst, pattern);
    case 8:
      return fill_typed<std::uint64_t>(dst, pattern);
    default:
      std::abort();
  }
}

}  // namespace flexkit::backend::cpu
