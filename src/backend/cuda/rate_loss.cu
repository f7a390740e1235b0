// The fused rate loss on CUDA: one block, over runs of kThreads samples. The rates of a run's
// (class, sample) pairs are spread over every thread (their loads in flight together, not one
// sample's classes one after another), kept in shared memory where they fit, then each thread
// finishes one sample (gradient, loss term, hit) and thread 0 adds the run's terms in sample
// order, so the sum is the CPU's, bit for bit.
#include <cuda_runtime.h>

#include "backend/cuda/check.hpp"
#include "backend/cuda/launch_support.hpp"
#include "backend/rate_loss.hpp"
#include "flexkit/cuda.hpp"

namespace flexkit::backend {
namespace cuda {
namespace {

constexpr int kThreads = 256;
// Classes whose rates a run keeps in shared memory (kThreads floats each, 48 KiB in all).
constexpr std::int64_t kSharedClasses = 48;

// kShared: the rates read back from shared memory (args.classes <= kSharedClasses), else from
// args.rate.
template <bool kShared>
__global__ void __launch_bounds__(kThreads)
    rate_loss_kernel(const __grid_constant__ portable::RateLossArgs args) {
  extern __shared__ float shared_rates[];  // [classes][kThreads]
  __shared__ double terms[kThreads];
  __shared__ int hits[kThreads];
  double sum = 0.0;  // thread 0's
  long long correct = 0;
  for (std::int64_t first = 0; first < args.n; first += kThreads) {
    const std::int64_t count = args.n - first < kThreads ? args.n - first : kThreads;
    for (std::int64_t j = threadIdx.x; j < args.classes * count; j += kThreads) {
      const std::int64_t c = j / count, s = j - c * count;
      const float r = portable::rate_loss_rate(args, c, first + s);
      args.rate[c * args.n + first + s] = r;
      if constexpr (kShared) shared_rates[c * kThreads + s] = r;
    }
    __syncthreads();  // the run's rates, shared and global, visible to the block
    const std::int64_t i = first + threadIdx.x;
    bool hit = false;
    double term = 0.0;
    if (threadIdx.x < count) {
      if constexpr (kShared) {
        term = portable::rate_loss_finish(
            args, i, [&](std::int64_t c) { return shared_rates[c * kThreads + threadIdx.x]; }, hit);
      } else {
        term = portable::rate_loss_finish(
            args, i, [&](std::int64_t c) { return args.rate[c * args.n + i]; }, hit);
      }
    }
    terms[threadIdx.x] = term;
    hits[threadIdx.x] = hit ? 1 : 0;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (std::int64_t k = 0; k < count; ++k) {
        sum = __dadd_rn(sum, terms[k]);
        correct += hits[k];
      }
    }
    __syncthreads();  // terms, hits and the shared rates are written again by the next run
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
  if (args.classes <= kSharedClasses) {
    const std::size_t shared = static_cast<std::size_t>(args.classes) * kThreads * sizeof(float);
    rate_loss_kernel<true><<<1, kThreads, shared, stream>>>(args);
  } else {
    rate_loss_kernel<false><<<1, kThreads, 0, stream>>>(args);
  }
  FLEXKIT_CUDA_CHECK_LAUNCH("rate_loss_kernel");
}

}  // namespace flexkit::backend
