// Host side of the deep-K exact integer GEMM kernel (gemm_deep_k.cu): a small output over a long
// K, both operands int16 with K their unit stride — the filter gradient of a 1×1 convolution,
// whose K is every position of every batch entry.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/gemm/gemm_kernel_args.cuh"

namespace flexkit::backend::cuda::gemm_kernels {

// Whether the kernel takes `args` on a device of `sms` multiprocessors: int16 A and B (no u8 B),
// both with unit K stride, 16-byte aligned bases and rows, one batch entry; the smaller side at
// most 64 rows and the output at most sms / 2 tiles of 128 × 64, so that K splits fill the
// machine.
bool deep_k_fits(const IntegerGemmArgs& args, int sms);

// On the current device: raises the kernel's shared-memory limit; false without sm_90a code.
bool prepare_deep_k();

// Queues the kernel and its finishing pass (the call's two kernels; the first a programmatic
// dependent of the grid before it, the device being sm_90): every output's exact int64 sum is
// added into a half of the stream's alternating_workspace (args.workspace is not read), then
// rounded into args.c by the finishing pass, which also sets the other half (the call before's
// sums) back to zeros and publishes the statistics (args.stats_host and args.stats_arrivals set,
// DeviceStatsRecord::published_in_kernel).
void launch_deep_k(const IntegerGemmArgs& args, int device, int sms, cudaStream_t stream);

}  // namespace flexkit::backend::cuda::gemm_kernels
