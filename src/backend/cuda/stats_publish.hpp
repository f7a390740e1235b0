// Bringing a statistics record to the host without a copy: a one-thread kernel
// queued behind the product writes the device record into mapped pinned host memory and sets it
// back to the identity, ready for the record's next use.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "flexkit/portable/gemm_epilogue.hpp"

namespace flexkit::backend::cuda {

// Queues the publish on `stream`; `host` is the device's address of mapped pinned memory,
// `arrivals` the record's in-kernel publication counter (set back to 0 as well), or null.
void launch_publish_stats(portable::GemmStats* record, portable::GemmStats* host,
                          uint32_t* arrivals, cudaStream_t stream);

// The same for `count` (at most 32) generated-kernel records (codegen::ExprStats, 32 bytes each)
// whose kernel did not publish them: copied into mapped pinned host memory at `host` (its device
// address) and set back to zero.
void launch_publish_expr_stats(void* records, void* host, int count, cudaStream_t stream);

}  // namespace flexkit::backend::cuda
