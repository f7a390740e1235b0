// The fused rate loss on CUDA: one block. Each thread takes one sample of a run of kThreads (its
// rates, gradient, loss term and hit), then thread 0 adds the run's terms in sample order, so the
// sum is the CPU's, bit for bit.
#include <cuda_runtime.h>

#include "backend/cuda/check.hpp"
#include "backend/cuda/launch_support.hpp"
#include "backend/rate_loss.hpp"
#include "flexkit/cuda.hpp"

namespace flexkit::backend {
namespace cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    rate_loss_kernel(const __grid_constant__ portable::RateLossArgs args) {
  __shared__ double terms[kThreads];
  __shared__ int hits[kThreads];
  double sum = 0.0;  // thread 0's
  long long correct = 0;
  for (std::int64_t first = 0; first < args.n; first += kThreads) {
    const std::int64_t i = first + threadIdx.x;
    bool hit = false;
    terms[threadIdx.x] = i < args.n ? portable::rate_loss_sample(args, i, hit) : 0.0;
    hits[threadIdx.x] = hit ? 1 : 0;
    __syncthreads();
    if (threadIdx.x == 0) {
      const std::int64_t count = args.n - first < kThreads ? args.n - first : kThreads;
      for (std::int64_t k = 0; k < count; ++k) {
        sum = __dadd_rn(sum, terms[k]);
        correct += hits[k];
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    *args.loss = portable::rate_loss_total(args, sum);
    *args.correct = static_cast<float>(correct);
  }
}

}  // namespace
}  // namespace cuda

void run_rate_loss_cuda(const portable::RateLossArgs& args, int device) {
  using namespace cuda;
  DeviceGuard guard(device);
  auto stream = static_cast<cudaStream_t>(flexkit::cuda::current_stream(device));
  rate_loss_kernel<<<1, kThreads, 0, stream>>>(args);
  FLEXKIT_CUDA_CHECK_LAUNCH("rate_loss_kernel");
}

}  // namespace flexkit::backend
