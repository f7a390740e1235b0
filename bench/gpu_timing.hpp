// GPU timing for the benchmarks: CUDA events around the body, median of repeats after warm-up.
// `before` (untimed) is queued ahead of each timed repeat: a long memset there hides the body's
// host work behind GPU work, as in a training step, and evicts L2.
#pragma once
#include <cuda_runtime_api.h>

#include <algorithm>
#include <functional>
#include <vector>

namespace flexkit::bench {

inline double median_gpu_ms(const std::function<void()>& body, int warmup = 3, int repeats = 15,
                            const std::function<void(int)>& before = {}) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (int i = 0; i < warmup; ++i) body();
  std::vector<float> times;
  for (int i = 0; i < repeats; ++i) {
    if (before) before(i);
    cudaEventRecord(start);
    body();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace flexkit::bench
