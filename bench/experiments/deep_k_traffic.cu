// The memory ceiling of the deep-K kernel's traffic (gemm_deep_k.cu), with no arithmetic: the
// 1x1 C64 K256 56x56 N64 update, A 256 × 200 704 and B 64 × 200 704 int16, both k-contiguous.
// One thread per CTA streams the kernel's TMA boxes (A 128 rows × 64 k, B 64 × 64, 128-byte
// swizzle) through a ring of slots, each slot refilled as soon as it has landed; 132 CTAs as the
// kernel: 2 tile pairs × 66 K sets. Variants: how a CTA's stages are spread over K (interleaved
// as the kernel, runs of consecutive stages, one contiguous range), ring depth, L2 sector
// promotion, B left out. Beside them a plain sequential read of both operands and the
// device-to-device copy rate C (cudaMemcpyAsync of 1 GiB, bytes read + written) in the same
// process. Each time is the median of five rounds of 20 launches (CUDA events); the fraction is
// of C for the operands' bytes. The Markdown table goes to stdout.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "backend/cuda/gemm/tensor_map_encoder.hpp"
#include "backend/cuda/gemm/tma_pipeline.cuh"

namespace {

namespace tma = flexkit::backend::cuda::gemm_kernels::tma;

constexpr int64_t kK = 200704;  // 56 · 56 positions × batch 64
constexpr int kARows = 256, kBRows = 64;
constexpr int kStageK = 64;
constexpr uint32_t kABoxBytes = 128 * kStageK * 2, kBBoxBytes = 64 * kStageK * 2;

struct Maps {
  CUtensorMap a, b;
};

// The stages of a CTA: kRun consecutive stages per unit, units interleaved over the K sets
// (kRun 1: the kernel's order); kRun 0: one contiguous range per K set.
template <int kRun>
__device__ __forceinline__ int stage_count(int split, int splits, int stages) {
  if constexpr (kRun == 0) {
    const int per = (stages + splits - 1) / splits;
    const int left = stages - split * per;
    return per < left ? per : left;
  } else {
    const int units = (stages + kRun - 1) / kRun;
    return (units - split + splits - 1) / splits * kRun;
  }
}
template <int kRun>
__device__ __forceinline__ int stage_at(int s, int split, int splits, int stages) {
  if constexpr (kRun == 0) {
    return split * ((stages + splits - 1) / splits) + s;
  } else {
    return ((s / kRun) * splits + split) * kRun + s % kRun;
  }
}

template <int kSlots, int kRun, bool kLoadB>
__global__ void __launch_bounds__(32, 1)
    deep_k_loads(const __grid_constant__ Maps maps, int pairs, int splits, int stages) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  if (threadIdx.x != 0) return;
  const uint32_t base = (tma::shared_address(smem_raw) + 1023u) & ~1023u;
  constexpr uint32_t kSlotBytes = kABoxBytes + (kLoadB ? kBBoxBytes : 0);
  const uint32_t barriers = base + kSlots * kSlotBytes;
  const int pair = static_cast<int>(blockIdx.x) % pairs;
  const int split = static_cast<int>(blockIdx.x) / pairs;
  const int count = stage_count<kRun>(split, splits, stages);
  for (int i = 0; i < kSlots; ++i) tma::barrier_init(barriers + 8 * i, 1);
  tma::barrier_init_fence();
  auto load = [&](int s) {
    const int slot = s % kSlots;
    const uint32_t barrier = barriers + 8 * slot;
    const int stage = stage_at<kRun>(s, split, splits, stages);
    if (stage >= stages) {  // past K in a unit's tail: an arrival with no bytes
      tma::arrive(barrier);
      return;
    }
    const uint32_t dst = base + slot * kSlotBytes;
    tma::arrive_expect_bytes(barrier, kSlotBytes);
    tma::load_2d(dst, &maps.a, stage * kStageK, pair * 128, barrier);
    if constexpr (kLoadB) tma::load_2d(dst + kABoxBytes, &maps.b, stage * kStageK, 0, barrier);
  };
  for (int s = 0; s < count && s < kSlots; ++s) load(s);
  for (int s = 0; s < count; ++s) {
    tma::wait(barriers + 8 * (s % kSlots), uint32_t(s / kSlots) & 1u);
    if (s + kSlots < count) load(s + kSlots);
  }
}

__global__ void sequential_read(const int4* __restrict__ p, int64_t chunks, int* sink) {
  int acc = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < chunks;
       i += int64_t(gridDim.x) * blockDim.x) {
    int4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.s32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p + i));
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678) *sink = acc;  // never true for the data written below
}

CUtensorMap encode(void* data, int rows, int box_rows, CUtensorMapL2promotion promotion) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {cuuint64_t(kK), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(kK * 2)};
  const cuuint32_t box[2] = {cuuint32_t(kStageK), cuuint32_t(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = flexkit::backend::cuda::gemm_kernels::tensor_map_encoder()(
      &map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, data, dims, strides, box, element_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, promotion,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) std::fprintf(stderr, "cuTensorMapEncodeTiled failed (%d)\n", int(r));
  return map;
}

// Median ms of five rounds of 20 calls; negative when a launch failed.
template <typename F>
double time_ms(F f) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  f();
  if (cudaDeviceSynchronize() != cudaSuccess || cudaGetLastError() != cudaSuccess) return -1.0;
  std::vector<double> rounds;
  for (int round = 0; round < 5; ++round) {
    cudaEventRecord(start);
    for (int i = 0; i < 20; ++i) f();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    rounds.push_back(ms / 20);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(rounds.begin(), rounds.end());
  return rounds[2];
}

}  // namespace

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  int16_t *a = nullptr, *b = nullptr;
  void *from = nullptr, *to = nullptr;
  int* sink = nullptr;
  const size_t gib = size_t(1) << 30;
  if (cudaMalloc(&a, kARows * kK * 2) != cudaSuccess ||
      cudaMalloc(&b, kBRows * kK * 2) != cudaSuccess || cudaMalloc(&from, gib) != cudaSuccess ||
      cudaMalloc(&to, gib) != cudaSuccess || cudaMalloc(&sink, 4) != cudaSuccess) {
    std::fprintf(stderr, "bench_deep_k_traffic: no CUDA device memory\n");
    return 1;
  }
  cudaMemset(a, 1, kARows * kK * 2);
  cudaMemset(b, 2, kBRows * kK * 2);
  const double copy_ms = time_ms([&] { cudaMemcpyAsync(to, from, gib, cudaMemcpyDeviceToDevice); });
  const double copy_rate = 2.0 * double(gib) / (copy_ms * 1e-3) / 1e9;
  const double bytes = double(kARows + kBRows) * kK * 2;
  std::printf("1x1 C64 K256 56x56 N64 update operands: %.1f MB; C = %.0f GB/s (%.1f us at C)\n\n",
              bytes / 1e6, copy_rate, bytes / (copy_rate * 1e9) * 1e6);
  std::printf("| traffic | us | GB/s | of C |\n|---|---|---|---|\n");
  auto row = [&](const char* name, double ms, double moved) {
    if (ms < 0) {
      std::printf("| %s | failed | | |\n", name);
      return;
    }
    const double rate = moved / (ms * 1e-3) / 1e9;
    std::printf("| %s | %.1f | %.0f | %.2f |\n", name, ms * 1e3, rate, rate / copy_rate);
  };
  for (int per_sm : {2, 4, 8}) {
    char name[96];
    std::snprintf(name, sizeof name, "sequential 16-byte reads, %d CTAs of 512 a multiprocessor",
                  per_sm);
    row(name, time_ms([&] {
          sequential_read<<<sms * per_sm, 512>>>(reinterpret_cast<const int4*>(a),
                                                 kARows * kK * 2 / 16, sink);
          sequential_read<<<sms * per_sm, 512>>>(reinterpret_cast<const int4*>(b),
                                                 kBRows * kK * 2 / 16, sink);
        }),
        bytes);
  }
  const int pairs = 2, splits = sms / pairs, stages = static_cast<int>(kK / kStageK);
  auto boxes = [&](const char* name, auto kernel, int slots, bool load_b,
                   CUtensorMapL2promotion promotion) {
    const Maps maps{encode(a, kARows, 128, promotion), encode(b, kBRows, 64, promotion)};
    const int smem = slots * int(kABoxBytes + (load_b ? kBBoxBytes : 0)) + 8 * slots + 1024;
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    row(name, time_ms([&] { kernel<<<pairs * splits, 32, smem>>>(maps, pairs, splits, stages); }),
        load_b ? bytes : double(kARows) * kK * 2);
  };
  const auto none = CU_TENSOR_MAP_L2_PROMOTION_NONE;
  const auto l2_256 = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  boxes("TMA boxes, interleaved stages, 6 slots (the kernel's)", deep_k_loads<6, 1, true>, 6, true,
        none);
  boxes("the same, L2 promotion 256 B", deep_k_loads<6, 1, true>, 6, true, l2_256);
  boxes("runs of 4 stages, 6 slots", deep_k_loads<6, 4, true>, 6, true, none);
  boxes("runs of 16 stages, 6 slots", deep_k_loads<6, 16, true>, 6, true, none);
  boxes("runs of 16 stages, 8 slots, L2 promotion 256 B", deep_k_loads<8, 16, true>, 8, true,
        l2_256);
  boxes("one contiguous range a CTA, 6 slots", deep_k_loads<6, 0, true>, 6, true, none);
  boxes("interleaved, A only (its bytes), 6 slots", deep_k_loads<6, 1, false>, 6, false, none);
  return 0;
}
