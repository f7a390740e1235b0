// Whether each of many arrays holds only finite values, in one pass over all of them (one
// launch on CUDA): what the training step log records per parameter at every step.
#pragma once
#include <vector>

#include "flexkit/array.hpp"

namespace flexkit::backend {

// Arrays one pass can check: defined, contiguous, f32, bf16 or flex16 (flex16 holds no
// infinity or NaN, so it is not read), starting on a 4-byte boundary, on `out`'s device.
bool finite_checkable(const std::vector<Array>& arrays, const Array& out);

// Writes out[k] = 0 where every element of arrays[k] is finite and NaN where one is not (what
// sum(arrays[k] * 0) gives, up to the sign of zero). `out`: contiguous f32 with one element per
// array; requires finite_checkable. On CUDA it is queued on the device's current stream (a
// memset and one kernel, so it can be captured in a graph).
void record_finite(const std::vector<Array>& arrays, const Array& out);

void record_finite_cpu(const std::vector<const void*>& data, const std::vector<DType>& dtypes,
                       const std::vector<std::int64_t>& sizes, float* out);
void record_finite_cuda(const std::vector<const void*>& data, const std::vector<DType>& dtypes,
                        const std::vector<std::int64_t>& sizes, float* out, int device);

}  // namespace flexkit::backend
