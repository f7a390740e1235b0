// GPU timing for the benchmarks: CUDA events around the body, median of repeats after warm-up.
#pragma once
#include <cuda_runtime_api.h>

#include <algorithm>
#include <functional>
#include <vector>

namespace flexkit::bench {

inline double median_gpu_ms(const std::function<void()>& body, int warmup = 3, int repeats = 15) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (int i = 0; i < warmup; ++i) body();
  std::vector<float> times;
  for (int i = 0; i < repeats; ++i) {
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
