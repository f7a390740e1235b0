// record_finite: which arrays one pass can check, and the backend that checks them.
#include "backend/finite_check.hpp"

#include <cstdint>

#include "core/text.hpp"
#include "flexkit/error.hpp"

namespace flexkit::backend {

bool finite_checkable(const std::vector<Array>& arrays, const Array& out) {
  if (!out.defined() || out.dtype() != DType::f32 || !out.is_contiguous() ||
      out.size() != static_cast<std::int64_t>(arrays.size()))
    return false;
  for (const Array& a : arrays)
    if (!a.defined() || !a.is_contiguous() || a.device() != out.device() ||
        (a.dtype() != DType::f32 && a.dtype() != DType::bf16 && a.dtype() != DType::flex16) ||
        reinterpret_cast<std::uintptr_t>(a.data()) % 4 != 0)  // CUDA reads 4-byte words
      return false;
  return true;
}

void record_finite(const std::vector<Array>& arrays, const Array& out) {
  if (!finite_checkable(arrays, out))
    throw ValueError(detail::cat("record_finite: ", arrays.size(),
                                 " arrays need contiguous f32, bf16 or flex16 data and a "
                                 "contiguous f32 result of as many elements on their device"));
  std::vector<const void*> data;
  std::vector<DType> dtypes;
  std::vector<std::int64_t> sizes;
  for (const Array& a : arrays) {
    data.push_back(a.data());
    dtypes.push_back(a.dtype());
    sizes.push_back(a.dtype() == DType::flex16 ? 0 : a.size());  // always finite: not read
  }
  auto* result = static_cast<float*>(out.data());
  if (out.device().is_cuda())
    record_finite_cuda(data, dtypes, sizes, result, out.device().index);
  else
    record_finite_cpu(data, dtypes, sizes, result);
}

}  // namespace flexkit::backend
