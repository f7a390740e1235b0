// The statistics of generated-kernel flex16 writes (expressions, neuron sequences), brought back
// without waiting: a copy into pinned host memory is queued behind the kernel and an event marks
// its arrival. Each output's storage keeps its pending statistics; only a read waits, and by
// then (an Autoflex manager reads them at the tensor's next write) the copy has long arrived.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "core/storage.hpp"

namespace flexkit::backend::cuda {

// Queues the copy of `count` codegen::ExprStats records at `device_records` (device memory that
// stream order keeps valid until the copy ran) behind the work on `stream`, and returns one
// pending statistics per record.
std::vector<std::shared_ptr<detail::PendingFlex16Stats>> pending_expr_stats(
    int device, cudaStream_t stream, const void* device_records, std::size_t count);

}  // namespace flexkit::backend::cuda
