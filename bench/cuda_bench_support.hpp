// What the CUDA benchmarks that check and time flexkit beside a peer share: CUDA status checks
// that name the failing call, the "left out on purpose" outcome, the stream everything is queued
// on, progress lines on stderr, printf-style formatting, the timing of a call by CUDA events and a
// fast seeded generator.
#pragma once
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "flexkit/flexkit.hpp"

namespace flexkit::bench {

inline void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return;
  throw std::runtime_error(std::string(call) + " failed: " + cudaGetErrorName(status) + " (" +
                           cudaGetErrorString(status) + ") at " + file + ":" +
                           std::to_string(line));
}

#define CUDA_CHECK(call) ::flexkit::bench::check_cuda((call), #call, __FILE__, __LINE__)

// A measurement left out on purpose (too slow, too big, past the time limit): not a failure.
struct Skipped : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// flexkit queues device 0's work on this stream; peers, copies and events use it too, so every
// timed span covers exactly the work it names and nothing races.
inline cudaStream_t stream() {
  return static_cast<cudaStream_t>(cuda::current_stream(0));
}

inline const auto g_start = std::chrono::steady_clock::now();
inline double elapsed_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - g_start).count();
}

[[gnu::format(printf, 1, 2)]] inline void progress(const char* format, ...) {
  std::fprintf(stderr, "[%6.1f s] ", elapsed_s());
  va_list args;
  va_start(args, format);
  std::vfprintf(stderr, format, args);
  va_end(args);
  std::fputc('\n', stderr);
  std::fflush(stderr);
}

[[gnu::format(printf, 1, 2)]] inline std::string fmt(const char* format, ...) {
  char buffer[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof buffer, format, args);
  va_end(args);
  return buffer;
}

struct Timing {
  double ms = 0;    // median per call
  int repeats = 0;  // timed samples
  int batch = 0;    // calls per sample
};

struct Events {
  cudaEvent_t start = nullptr, stop = nullptr;
  Events() {
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~Events() {
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
};

// CUDA events around `batch` back-to-back calls per sample, so that calls of a few microseconds
// are not dominated by the host's launch latency; median over ≥ 10 samples after warm-up. A first
// call slower than max_call_ms is Skipped (≥ 10 repeats of it would take too much of the run).
inline Timing time_kernel(const std::function<void()>& body, double max_call_ms) {
  Events ev;
  // The first call may plan, compile or allocate a workspace: never timed.
  body();
  CUDA_CHECK(cudaStreamSynchronize(stream()));
  CUDA_CHECK(cudaGetLastError());
  auto span_ms = [&](int calls) {
    CUDA_CHECK(cudaEventRecord(ev.start, stream()));
    for (int i = 0; i < calls; ++i) body();
    CUDA_CHECK(cudaEventRecord(ev.stop, stream()));
    CUDA_CHECK(cudaEventSynchronize(ev.stop));
    CUDA_CHECK(cudaGetLastError());
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, ev.start, ev.stop));
    return static_cast<double>(ms);
  };
  const double one = span_ms(1);
  if (one > max_call_ms) throw Skipped(fmt("one call took %.0f ms (limit %.0f)", one, max_call_ms));
  Timing t;
  t.batch = std::clamp(static_cast<int>(std::ceil(1.0 / std::max(one, 1e-3))), 1, 64);
  t.repeats = one >= 20 ? 10 : 20;  // slow calls: fewer repeats, still ≥ 10
  span_ms(t.batch);                 // warm-up at the timed batch size
  std::vector<double> samples;
  for (int i = 0; i < t.repeats; ++i) samples.push_back(span_ms(t.batch) / t.batch);
  std::sort(samples.begin(), samples.end());
  const std::size_t h = samples.size() / 2;
  t.ms = samples.size() % 2 ? samples[h] : 0.5 * (samples[h - 1] + samples[h]);
  return t;
}

// SplitMix64: seeded, and fast enough for operands of hundreds of millions of elements.
struct SplitMix {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
};

}  // namespace flexkit::bench
