#include "backend/cuda/check.hpp"
#include "backend/cuda/stats_publish.hpp"

namespace flexkit::backend::cuda {
namespace {

__global__ void publish_stats_kernel(portable::GemmStats* record, portable::GemmStats* host) {
  *host = *record;
  *record = portable::gemm_stats_identity();
  __threadfence_system();  // the host reads the record once the stream has passed this kernel
}

}  // namespace

void launch_publish_stats(portable::GemmStats* record, portable::GemmStats* host,
                          cudaStream_t stream) {
  publish_stats_kernel<<<1, 1, 0, stream>>>(record, host);
  FLEXKIT_CUDA_CHECK_LAUNCH("publish_stats_kernel");
}

}  // namespace flexkit::backend::cuda
