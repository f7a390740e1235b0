// The per-array finiteness check on the CPU.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>

#include "backend/cpu/thread_pool.hpp"
#include "backend/finite_check.hpp"

namespace flexkit::backend {
namespace {

constexpr std::int64_t kChunk = 1 << 16;

// Whether element range [begin, end) of an f32 or bf16 array holds an infinity or NaN (an
// exponent of all ones).
bool has_nonfinite(const void* data, DType dtype, std::int64_t begin, std::int64_t end) {
  if (dtype == DType::f32) {
    const auto* p = static_cast<const std::uint32_t*>(data);
    for (std::int64_t i = begin; i < end; ++i)
      if ((p[i] & 0x7f800000u) == 0x7f800000u) return true;
    return false;
  }
  const auto* p = static_cast<const std::uint16_t*>(data);
  for (std::int64_t i = begin; i < end; ++i)
    if ((p[i] & 0x7f80u) == 0x7f80u) return true;
  return false;
}

}  // namespace

void record_finite_cpu(const std::vector<const void*>& data, const std::vector<DType>& dtypes,
                       const std::vector<std::int64_t>& sizes, float* out) {
  // Chunks of every array spread over the cores; a chunk that finds one marks its array.
  std::vector<std::int64_t> first_chunk{0};
  for (std::int64_t n : sizes)
    first_chunk.push_back(first_chunk.back() + (n + kChunk - 1) / kChunk);
  std::vector<std::atomic<bool>> bad(sizes.size());
  for (auto& b : bad) b.store(false);
  cpu::parallel_for(first_chunk.back(), 1, [&](std::int64_t c0, std::int64_t c1) {
    std::size_t t = 0;
    for (std::int64_t c = c0; c < c1; ++c) {
      while (c >= first_chunk[t + 1]) ++t;
      const std::int64_t begin = (c - first_chunk[t]) * kChunk;
      const std::int64_t end = std::min(sizes[t], begin + kChunk);
      if (has_nonfinite(data[t], dtypes[t], begin, end)) bad[t].store(true);
    }
  });
  for (std::size_t t = 0; t < sizes.size(); ++t)
    out[t] = bad[t].load() ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
}

}  // namespace flexkit::backend
