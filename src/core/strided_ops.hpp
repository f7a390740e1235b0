// The element-moving primitives every backend provides for arrays: strided copy (with flex16
// re-scaling) and fill. Operands share one shape; strides may differ (and be 0 on the source).
// Declared here because Array's copies dispatch to them; defined by the backends
// (backend/cpu/strided_ops.cpp, backend/cuda/strided_kernels.cu, backend/cuda_unavailable.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "flexkit/device.hpp"
#include "flexkit/flex16.hpp"
#include "flexkit/portable/strided_layout.hpp"

namespace flexkit::detail {
class PendingFlex16Stats;  // core/storage.hpp
}

namespace flexkit::backend {

using portable::StridedLayout;

struct StridedDst {
  StridedLayout layout;
  void* base;  // element 0 of the storage slice the layout indexes from
};
struct StridedSrc {
  StridedLayout layout;
  const void* base;
};

namespace cpu {
void copy(const StridedDst& dst, const StridedSrc& src, std::size_t elem_size);
// int16 mantissas re-expressed from src_iwl to dst_iwl; returns the write's statistics.
Flex16Stats flex16_copy(const StridedDst& dst, const StridedSrc& src, int src_iwl, int dst_iwl);
// Every element set to the low elem_size bytes of pattern.
void fill(const StridedDst& dst, std::uint64_t pattern, std::size_t elem_size);
}  // namespace cpu

namespace cuda {
// All enqueue on the current stream of `device`. flex16_copy returns its write's statistics
// pending (null for an empty copy): the host does not wait for the copy.
void copy(int device, const StridedDst& dst, const StridedSrc& src, std::size_t elem_size);
std::shared_ptr<::flexkit::detail::PendingFlex16Stats> flex16_copy(int device,
                                                                   const StridedDst& dst,
                                                                   const StridedSrc& src,
                                                                   int src_iwl, int dst_iwl);
void fill(int device, const StridedDst& dst, std::uint64_t pattern, std::size_t elem_size);
// Contiguous bytes between any two places (cpu or cuda); returns when the host side is safe.
void memcpy_bytes(Device dst_device, void* dst, Device src_device, const void* src,
                  std::size_t bytes);
// Host bytes to `device` without waiting for it: staged through pinned buffers and copied in the
// current stream's order (host_staging.cpp). False, with nothing done, when too large to stage.
bool upload_staged(int device, void* dst, const void* src, std::size_t bytes);
}  // namespace cuda

}  // namespace flexkit::backend
