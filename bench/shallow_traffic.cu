// The memory ceiling of the shallow convolution kernel's traffic (gemm_shallow_specialized.cuh),
// with no arithmetic: the 1x1 C64 K256 56x56 N64 fprop pattern. 132 persistent CTAs over 2 tile
// rows; each CTA walks every 66th column tile, streams the 64 x TN int16 B tile through a 6-slot
// cp.async ring and writes a 128 x TN int16 output tile with 16-byte stores, warp w rows
// 16w … 16w + 15. Variants: tile shape, rows per store instruction, cache hints on the stores
// (streaming .cs, L2 evict_first) and on B's reads (L2 evict_last). Each variant's time is the
// median of three rounds of 20 launches (CUDA events), beside the device-to-device copy rate C
// (cudaMemcpyAsync of 1 GiB, bytes read + written) measured in the same process. The Markdown
// table goes to stdout.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#define CK(x)                                             \
  do {                                                    \
    cudaError_t e = (x);                                  \
    if (e != cudaSuccess) {                               \
      std::printf("%s: %s\n", #x, cudaGetErrorString(e)); \
      return -1.0;                                        \
    }                                                     \
  } while (0)

namespace {

constexpr int kRing = 6;

__device__ __forceinline__ void cp16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp16_hint(uint32_t dst, const void* src, uint64_t policy) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(dst),
               "l"(src), "l"(policy)
               : "memory");
}
// kStore: 0 plain, 1 .cs (streaming), 2 L2 evict_first policy.
template <int kStore>
__device__ __forceinline__ void store16(int16_t* p, int4 v, uint64_t policy) {
  if constexpr (kStore == 0) {
    *reinterpret_cast<int4*>(p) = v;
  } else if constexpr (kStore == 1) {
    asm volatile("st.global.cs.v4.s32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "r"(v.x), "r"(v.y),
                 "r"(v.z), "r"(v.w)
                 : "memory");
  } else {
    asm volatile("st.global.L2::cache_hint.v4.s32 [%0], {%1, %2, %3, %4}, %5;\n" ::"l"(p), "r"(v.x),
                 "r"(v.y), "r"(v.z), "r"(v.w), "l"(policy)
                 : "memory");
  }
}

// kTN: tile columns (128 or 256). kRowsPerStore: output rows one warp store instruction covers
// (4: 8 lanes x 16 B per 128-byte half row, as the kernel; 2: 16 lanes per 256-byte row).
template <int kTN, int kRowsPerStore, bool kRead, int kTileRows = 128, int kStore = 0,
          bool kReadHint = false>
__global__ void __launch_bounds__(256, 1)
    pattern(const int16_t* __restrict__ b, int16_t* __restrict__ o, int64_t n, int tiles_n) {
  extern __shared__ __align__(16) unsigned char smem[];
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  constexpr int kSlot = 64 * kTN * 2;
  constexpr int kChunksPerRow = kTN / 8;
  constexpr int kChunks = 64 * kChunksPerRow / 256;  // per thread
  const int tiles_m = 256 / kTileRows;
  const int tm = blockIdx.x % tiles_m, cpr = gridDim.x / tiles_m, first = blockIdx.x / tiles_m;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int count = first < tiles_n ? (tiles_n - first + cpr - 1) / cpr : 0;
  uint64_t store_policy, read_policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(store_policy));
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(read_policy));
  auto issue = [&](int i) {
    if (kRead && i < count) {
      const int64_t col0 = int64_t(first + i * cpr) * kTN;
      const uint32_t slot = base + (i % kRing) * kSlot;
#pragma unroll
      for (int j = 0; j < kChunks; ++j) {
        const int c = threadIdx.x + 256 * j, row = c / kChunksPerRow, ch = c % kChunksPerRow;
        if constexpr (kReadHint) {
          cp16_hint(slot + 16 * c, b + row * n + col0 + 8 * ch, read_policy);
        } else {
          cp16(slot + 16 * c, b + row * n + col0 + 8 * ch);
        }
      }
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  };
  for (int i = 0; i < kRing - 1; ++i) issue(i);
  int4 acc = make_int4(lane, warp, tm, 1);
  for (int i = 0; i < count; ++i) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kRing - 2) : "memory");
    __syncthreads();
    issue(i + kRing - 1);
    if (kRead) {
      const int4 v = reinterpret_cast<const int4*>(smem + (i % kRing) * kSlot)[threadIdx.x];
      acc.x ^= v.x;
      acc.y ^= v.y;
    }
    const int64_t col0 = int64_t(first + i * cpr) * kTN;
    // Warp w writes rows 16w .. 16w + 15 of the tile, all kTN columns.
    constexpr int kLanesPerRow = 32 / kRowsPerStore;
    constexpr int kSegments = kTN / (8 * kLanesPerRow);  // per row
#pragma unroll
    for (int seg = 0; seg < kSegments; ++seg) {
#pragma unroll
      for (int k = 0; k < kTileRows / 8 / kRowsPerStore; ++k) {
        const int r = kRowsPerStore * k + lane / kLanesPerRow;
        const int64_t row = int64_t(tm) * kTileRows + (kTileRows / 8) * warp + r;
        store16<kStore>(o + row * n + col0 + 8 * (kLanesPerRow * seg + lane % kLanesPerRow), acc,
                        store_policy);
      }
    }
  }
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

// One variant's time per launch (ms), or a negative value on a CUDA error.
template <int kTN, int kRowsPerStore, bool kRead, int kTileRows = 128, int kStore = 0,
          bool kReadHint = false>
double time_ms(const int16_t* b, int16_t* o, int64_t n) {
  const int smem = kRing * 64 * kTN * 2;
  auto k = pattern<kTN, kRowsPerStore, kRead, kTileRows, kStore, kReadHint>;
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const int tiles_n = static_cast<int>(n / kTN);
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int w = 0; w < 3; ++w) k<<<132, 256, smem>>>(b, o, n, tiles_n);
  CK(cudaDeviceSynchronize());
  const int reps = 20;
  CK(cudaEventRecord(e0));
  for (int r = 0; r < reps; ++r) k<<<132, 256, smem>>>(b, o, n, tiles_n);
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return ms / reps;
}

double copy_rate_gbs() {
  const size_t big = size_t(1) << 30;
  void *x, *y;
  CK(cudaMalloc(&x, big));
  CK(cudaMalloc(&y, big));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaMemcpy(y, x, big, cudaMemcpyDeviceToDevice));
  CK(cudaEventRecord(e0));
  for (int r = 0; r < 5; ++r) CK(cudaMemcpyAsync(y, x, big, cudaMemcpyDeviceToDevice));
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  cudaFree(x);
  cudaFree(y);
  return 2.0 * big / (ms / 5 * 1e-3) / 1e9;
}

struct Variant {
  const char* name;
  bool reads;
  double (*run)(const int16_t*, int16_t*, int64_t);
};

}  // namespace

int main() {
  const int64_t n = 200704;  // 56 · 56 · 64 columns
  int16_t *b = nullptr, *o = nullptr;
  if (cudaMalloc(&b, 64 * n * 2) != cudaSuccess || cudaMalloc(&o, 256 * n * 2) != cudaSuccess ||
      cudaMemset(b, 1, 64 * n * 2) != cudaSuccess) {
    std::printf("bench_shallow_traffic: device allocation failed\n");
    return 1;
  }
  const double copy_gbs = copy_rate_gbs();
  if (copy_gbs < 0) return 1;
  const Variant variants[] = {
      {"B + O, 128 x 128 tiles, 4 rows per store", true, time_ms<128, 4, true>},
      {"B + O, 128 x 128 tiles, 2 rows per store", true, time_ms<128, 2, true>},
      {"B + O, 128 x 256 tiles, 4 rows per store", true, time_ms<256, 4, true>},
      {"B + O, 256 x 128 tiles (B read once)", true, time_ms<128, 4, true, 256>},
      {"B + O, stores st.global.cs", true, time_ms<128, 4, true, 128, 1>},
      {"B + O, stores L2 evict_first", true, time_ms<128, 4, true, 128, 2>},
      {"B + O, B reads L2 evict_last", true, time_ms<128, 4, true, 128, 0, true>},
      {"B + O, .cs stores, B reads evict_last", true, time_ms<128, 4, true, 128, 1, true>},
      {"O only, plain stores", false, time_ms<128, 4, false>},
      {"O only, stores st.global.cs", false, time_ms<128, 4, false, 128, 1>},
  };
  constexpr int kVariants = sizeof(variants) / sizeof(variants[0]);
  std::vector<double> times[kVariants];
  for (int round = 0; round < 3; ++round) {
    for (int v = 0; v < kVariants; ++v) {
      const double ms = variants[v].run(b, o, n);
      if (ms < 0) return 1;
      times[v].push_back(ms);
    }
  }
  std::printf("copy 1 GiB device-to-device: %.1f GB/s (= C)\n\n", copy_gbs);
  std::printf("| shallow kernel traffic, 1x1 C64 K256 56x56 fprop | ms | GB/s | of C |\n");
  std::printf("|---|---|---|---|\n");
  for (int v = 0; v < kVariants; ++v) {
    std::vector<double> t = times[v];
    std::sort(t.begin(), t.end());
    const double ms = t[1];
    const double bytes = (variants[v].reads ? 64.0 : 0.0) * n * 2 + 256.0 * n * 2;
    const double gbs = bytes / (ms * 1e-3) / 1e9;
    std::printf("| %s | %.4f | %.0f | %.2f |\n", variants[v].name, ms, gbs, gbs / copy_gbs);
  }
  cudaFree(b);
  cudaFree(o);
  return 0;
}
