#include "backend/cuda/stats_publish.cuh"

#include "backend/cuda/check.hpp"
#include "backend/cuda/stats_publish.hpp"

namespace flexkit::backend::cuda {
namespace {

__global__ void publish_stats_kernel(portable::GemmStats* record, portable::GemmStats* host,
                                     uint32_t* arrivals) {
  publish_record(record, host, arrivals);
}

}  // namespace

void launch_publish_stats(portable::GemmStats* record, portable::GemmStats* host,
                          uint32_t* arrivals, cudaStream_t stream) {
  publish_stats_kernel<<<1, 1, 0, stream>>>(record, host, arrivals);
  FLEXKIT_CUDA_CHECK_LAUNCH("publish_stats_kernel");
}

}  // namespace flexkit::backend::cuda
