// The per-array finiteness check on CUDA: a memset of the results, then one launch over every
// array (up to kMaxArrays; more take more launches). Each array owns a run of blocks that read
// it in 16-byte words where it is aligned; a block that meets an infinity or NaN stores NaN into
// the array's result (blocks that do store the same bits).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/check.hpp"
#include "backend/cuda/launch_support.hpp"
#include "backend/finite_check.hpp"
#include "flexkit/cuda.hpp"

namespace flexkit::backend {
namespace cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxArrays = 32;

struct FiniteArray {
  const void* data;
  std::int64_t words;  // 4-byte words to read (an odd bf16 count: its last element apart)
  float* out;
  std::int32_t bf16;      // else f32
  std::int32_t odd_last;  // bf16: the element past the words, read alone
  std::int32_t aligned16;
  std::int32_t first_block;
  std::int32_t blocks;
};

struct FiniteArgs {
  FiniteArray arrays[kMaxArrays];
  int count;
};
static_assert(sizeof(FiniteArgs) <= 4096, "kernel parameters past the classic 4 KiB limit");

// Whether a word (one f32, or two bf16) holds an exponent of all ones.
__device__ __forceinline__ bool nonfinite(std::uint32_t w, bool bf16) {
  if (!bf16) return (w & 0x7f800000u) == 0x7f800000u;
  return (w & 0x7f80u) == 0x7f80u || (w & 0x7f800000u) == 0x7f800000u;
}

__global__ void __launch_bounds__(kThreads) finite_kernel(const __grid_constant__ FiniteArgs args) {
  const int block = static_cast<int>(blockIdx.x);
  int t = 0;
  while (t + 1 < args.count && block >= args.arrays[t + 1].first_block) ++t;
  const FiniteArray& a = args.arrays[t];
  const bool bf16 = a.bf16 != 0;
  const std::int64_t stride = static_cast<std::int64_t>(a.blocks) * kThreads;
  const std::int64_t first =
      static_cast<std::int64_t>(block - a.first_block) * kThreads + threadIdx.x;
  const auto* words = static_cast<const std::uint32_t*>(a.data);
  bool bad = false;
  const std::int64_t quads = a.aligned16 ? a.words / 4 : 0;
  for (std::int64_t q = first; q < quads; q += stride) {
    const uint4 u = __ldcs(reinterpret_cast<const uint4*>(words) + q);
    bad = bad || nonfinite(u.x, bf16) || nonfinite(u.y, bf16) || nonfinite(u.z, bf16) ||
          nonfinite(u.w, bf16);
  }
  for (std::int64_t i = quads * 4 + first; i < a.words; i += stride)
    bad = bad || nonfinite(words[i], bf16);
  if (a.odd_last && first == 0) {
    const std::uint16_t last = static_cast<const std::uint16_t*>(a.data)[2 * a.words];
    bad = bad || (last & 0x7f80u) == 0x7f80u;
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0) *a.out = __int_as_float(0x7fc00000);
}

}  // namespace
}  // namespace cuda

void record_finite_cuda(const std::vector<const void*>& data, const std::vector<DType>& dtypes,
                        const std::vector<std::int64_t>& sizes, float* out, int device) {
  using namespace cuda;
  if (sizes.empty()) return;
  DeviceGuard guard(device);
  auto stream = static_cast<cudaStream_t>(flexkit::cuda::current_stream(device));
  FLEXKIT_CUDA_CHECK(cudaMemsetAsync(out, 0, sizes.size() * sizeof(float), stream));
  const int max_blocks = multiprocessors(device) * (2048 / kThreads);
  for (std::size_t first = 0; first < sizes.size(); first += kMaxArrays) {
    const std::size_t last = std::min(sizes.size(), first + kMaxArrays);
    FiniteArgs args{};
    int blocks = 0;
    for (std::size_t k = first; k < last; ++k) {
      if (sizes[k] == 0) continue;  // nothing to read (flex16, or empty): the result stays 0
      FiniteArray& a = args.arrays[args.count++];
      const bool bf16 = dtypes[k] == DType::bf16;
      a.data = data[k];
      a.words = bf16 ? sizes[k] / 2 : sizes[k];
      a.out = out + k;
      a.bf16 = bf16 ? 1 : 0;
      a.odd_last = bf16 && sizes[k] % 2 ? 1 : 0;
      a.aligned16 = reinterpret_cast<std::uintptr_t>(data[k]) % 16 == 0 ? 1 : 0;
      a.first_block = blocks;
      const std::int64_t per_block = static_cast<std::int64_t>(kThreads) * (a.aligned16 ? 4 : 1);
      a.blocks = static_cast<int>(
          std::clamp<std::int64_t>((a.words + per_block - 1) / per_block, 1, max_blocks));
      blocks += a.blocks;
    }
    if (args.count == 0) continue;
    finite_kernel<<<blocks, kThreads, 0, stream>>>(args);
    FLEXKIT_CUDA_CHECK_LAUNCH("finite_kernel");
  }
}

}  // namespace flexkit::backend
