// What the CUDA benchmarks that check and time flexkit beside a peer share: CUDA status checks
// that name the failing call, the "left out on purpose" outcome, the stream everything is queued
// on, progress lines on stderr, printf-style formatting and a fast seeded generator.
#pragma once
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>

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
