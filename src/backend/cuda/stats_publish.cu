#include "backend/cuda/stats_publish.cuh"

#include "backend/cuda/check.hpp"
#include "backend/cuda/stats_publish.hpp"

namespace flexkit::backend::cuda {
namespace {

__global__ void publish_stats_kernel(portable::GemmStats* record, portable::GemmStats* host,
                                     uint32_t* arrivals) {
  publish_record(record, host, arrivals);
}

// One thread a record (codegen::ExprStats: four 8-byte words, the last the host address, kept):
// the statistics copied to the host and set back to zero, the arrival counter with them.
__global__ void publish_expr_stats_kernel(unsigned long long* records, unsigned long long* host,
                                          int count) {
  const int i = threadIdx.x;
  if (i < count) {
    for (int w = 0; w < 3; ++w) {
      host[4 * i + w] = __ldcg(&records[4 * i + w]);
      records[4 * i + w] = 0;
    }
  }
  __threadfence_system();
}

}  // namespace

void launch_publish_expr_stats(void* records, void* host, int count, cudaStream_t stream) {
  publish_expr_stats_kernel<<<1, 32, 0, stream>>>(static_cast<unsigned long long*>(records),
                                                  static_cast<unsigned long long*>(host), count);
  FLEXKIT_CUDA_CHECK_LAUNCH("publish_expr_stats_kernel");
}

void launch_publish_stats(portable::GemmStats* record, portable::GemmStats* host,
                          uint32_t* arrivals, cudaStream_t stream) {
  publish_stats_kernel<<<1, 1, 0, stream>>>(record, host, arrivals);
  FLEXKIT_CUDA_CHECK_LAUNCH("publish_stats_kernel");
}

}  // namespace flexkit::backend::cuda
