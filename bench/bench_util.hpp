// Timing helpers shared by the benchmarks: medians of repeats after warm-up.
#pragma once
#include <algorithm>
#include <chrono>
#include <functional>
#include <random>
#include <vector>

#include "flexkit/flexkit.hpp"

namespace flexkit::bench {

inline constexpr int kWarmup = 3;
inline constexpr int kRepeats = 15;

// Median wall time in ms of `body` (which must finish its work before returning).
inline double median_host_ms(const std::function<void()>& body, int repeats = kRepeats) {
  for (int i = 0; i < kWarmup; ++i) body();
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    auto start = std::chrono::steady_clock::now();
    body();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                    .count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Uniform random values in [lo, hi) as `dtype` on `device` (never zeros: SPEC's rule).
inline Array random_array(const Shape& shape, DType dtype, Device device, unsigned seed,
                          float lo = -1.0f, float hi = 1.0f) {
  std::vector<float> v(static_cast<std::size_t>(shape_numel(shape)));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  for (auto& x : v) x = u(rng);
  return Array::from_floats(v, shape, dtype, device);
}

}  // namespace flexkit::bench
