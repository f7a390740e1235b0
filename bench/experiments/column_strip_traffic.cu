// The ceiling of `A - max(A, 0)` over 4096 x 32768 f32 when a cluster holds whole column strips
// on chip, so that A is read once: each block of a cluster holds its share of the strip's rows,
// part in registers and part in shared memory (filled by cp.async or by plain loads), forms the
// column maxima, exchanges them in distributed shared memory and writes A - max from what it
// holds. Variants: the strip's width (the row segment each access reads), the cluster's size,
// threads a block, one launch a strip or persistent clusters walking the strips, streaming
// stores. Each variant's result is compared bit for bit with a two-kernel reference; its time is
// the median of three rounds of 20 launches (CUDA events), beside the device-to-device copy rate
// C (bytes read + written) measured in the same process. The Markdown table goes to stdout.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace cg = cooperative_groups;

#define CK(x)                                             \
  do {                                                    \
    cudaError_t e = (x);                                  \
    if (e != cudaSuccess) {                               \
      std::printf("%s: %s\n", #x, cudaGetErrorString(e)); \
      std::exit(1);                                       \
    }                                                     \
  } while (0)

namespace {

constexpr int kRows = 4096, kCols = 32768;

__device__ __forceinline__ float4 max4(float4 a, float4 b) {
  return make_float4(fmaxf(a.x, b.x), fmaxf(a.y, b.y), fmaxf(a.z, b.z), fmaxf(a.w, b.w));
}
__device__ __forceinline__ float4 sub4(float4 a, float4 b) {
  return make_float4(a.x - b.x, a.y - b.y, a.z - b.z, a.w - b.w);
}
__device__ __forceinline__ float4 shfl_xor4(float4 v, int off) {
  return make_float4(__shfl_xor_sync(~0u, v.x, off), __shfl_xor_sync(~0u, v.y, off),
                     __shfl_xor_sync(~0u, v.z, off), __shfl_xor_sync(~0u, v.w, off));
}
__device__ __forceinline__ void copy_async16(void* smem, const void* global) {
  const auto s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(global) : "memory");
}

// kStrip columns a strip (4 a thread), kThreads threads a block, kReg + kSm row chunks a thread
// (kReg in registers, kSm in shared memory); a cluster of `cluster` blocks covers the column.
template <int kStrip, int kThreads, int kReg, int kSm, bool kAsync, bool kStreaming>
__global__ void __launch_bounds__(kThreads, 1024 / kThreads)
    strip_kernel(const float* __restrict__ a, float* __restrict__ o, int strips, int clusters) {
  constexpr int kTpr = kStrip / 4;       // threads across a row
  constexpr int kRpp = kThreads / kTpr;  // rows a pass
  constexpr int kBlockRows = kRpp * (kReg + kSm);
  static_assert(kRpp <= 32 && 32 % kRpp == 0, "a warp reduces whole columns");
  extern __shared__ float4 held[];  // kSm * kThreads
  __shared__ float4 red[kRpp][kTpr];
  __shared__ float4 part[2][kTpr];
  __shared__ float4 total[kTpr];
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int blocks = static_cast<int>(cluster.num_blocks());
  const int tid = threadIdx.x, tx = tid % kTpr, ty = tid / kTpr;
  const int lane = tid & 31, warp = tid >> 5;
  int buf = 0;
  for (int strip = blockIdx.x / blocks; strip < strips; strip += clusters, buf ^= 1) {
    const std::size_t first = (static_cast<std::size_t>(rank) * kBlockRows + ty) * kCols +
                              static_cast<std::size_t>(strip) * kStrip + tx * 4;
    const std::size_t step = static_cast<std::size_t>(kRpp) * kCols;
    const float* pa = a + first;
    float* po = o + first;
    if (kAsync) {
#pragma unroll
      for (int j = 0; j < kSm; ++j) copy_async16(&held[j * kThreads + tid], pa + (kReg + j) * step);
      asm volatile("cp.async.commit_group;\n" ::: "memory");
    }
    float4 r[kReg];
#pragma unroll
    for (int j = 0; j < kReg; ++j) r[j] = __ldcs(reinterpret_cast<const float4*>(pa + j * step));
    if (!kAsync) {
#pragma unroll
      for (int j = 0; j < kSm; ++j)
        held[j * kThreads + tid] = __ldcs(reinterpret_cast<const float4*>(pa + (kReg + j) * step));
    }
    float4 m = r[0];
#pragma unroll
    for (int j = 1; j < kReg; ++j) m = max4(m, r[j]);
    if (kAsync) asm volatile("cp.async.wait_all;\n" ::: "memory");
#pragma unroll
    for (int j = 0; j < kSm; ++j) m = max4(m, held[j * kThreads + tid]);
    red[ty][tx] = m;
    __syncthreads();
    {
      // Warp w combines the kRpp rows of columns w * (32 / kRpp) + lane / kRpp.
      const int c = warp * (32 / kRpp) + lane / kRpp;
      float4 v = red[lane % kRpp][c];
#pragma unroll
      for (int off = kRpp / 2; off > 0; off >>= 1) v = max4(v, shfl_xor4(v, off));
      if (lane % kRpp == 0) part[buf][c] = v;
    }
    cluster.sync();
    if (tid < kTpr) {
      float4 t = *cluster.map_shared_rank(&part[buf][tid], 0);
      for (int b = 1; b < blocks; ++b) t = max4(t, *cluster.map_shared_rank(&part[buf][tid], b));
      total[tid] = t;
    }
    __syncthreads();
    const float4 mx = total[tx];
#pragma unroll
    for (int j = 0; j < kReg; ++j) {
      float4* dst = reinterpret_cast<float4*>(po + j * step);
      if (kStreaming)
        __stcs(dst, sub4(r[j], mx));
      else
        *dst = sub4(r[j], mx);
    }
#pragma unroll
    for (int j = 0; j < kSm; ++j) {
      float4* dst = reinterpret_cast<float4*>(po + (kReg + j) * step);
      if (kStreaming)
        __stcs(dst, sub4(held[j * kThreads + tid], mx));
      else
        *dst = sub4(held[j * kThreads + tid], mx);
    }
    __syncthreads();  // `total` and `held` are rewritten by the next strip
  }
  cluster.sync();  // no block leaves while another reads its partials
}

__global__ void column_max_reference(const float* a, float* mx) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= kCols) return;
  float m = a[c];
  for (int r = 1; r < kRows; ++r) m = fmaxf(m, a[static_cast<std::size_t>(r) * kCols + c]);
  mx[c] = m;
}
__global__ void subtract_reference(const float* a, const float* mx, float* o) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < static_cast<std::size_t>(kRows) * kCols) o[i] = a[i] - mx[i % kCols];
}
__global__ void count_differences(const unsigned* x, const unsigned* y, std::size_t n,
                                  unsigned long long* diff) {
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    if (x[i] != y[i]) atomicAdd(diff, 1ull);
}
__global__ void fill_random(float* a, std::size_t n) {
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    a[i] = static_cast<float>(static_cast<double>(z >> 40) / double(1 << 24) * 2.0 - 1.0);
  }
}

template <class F>
double median_ms(F launch) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  launch();
  CK(cudaDeviceSynchronize());
  std::vector<double> t;
  for (int round = 0; round < 3; ++round) {
    CK(cudaEventRecord(e0));
    for (int i = 0; i < 20; ++i) launch();
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    t.push_back(ms / 20);
  }
  std::sort(t.begin(), t.end());
  return t[1];
}

template <int kStrip, int kThreads, int kReg, int kSm, bool kAsync, bool kStreaming>
void run_variant(const char* name, int cluster, bool persistent, const float* a, float* o,
                 const float* ref, unsigned long long* diff, double c_rate) {
  auto kernel = strip_kernel<kStrip, kThreads, kReg, kSm, kAsync, kStreaming>;
  const int smem = kSm * kThreads * 16;
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  if (cluster > 8)
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  constexpr int kBlockRows = kThreads / (kStrip / 4) * (kReg + kSm);
  if (kBlockRows * cluster != kRows) {
    std::printf("| %s | rows %d x %d != %d |\n", name, kBlockRows, cluster, kRows);
    return;
  }
  const int strips = kCols / kStrip;
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = cluster;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.gridDim = dim3(strips * cluster);
  int active = 0;
  if (cudaOccupancyMaxActiveClusters(&active, kernel, &cfg) != cudaSuccess || active == 0) {
    std::printf("| %s | does not launch (%s) |\n", name, cudaGetErrorString(cudaGetLastError()));
    return;
  }
  const int clusters = persistent ? std::min(active, strips) : strips;
  cfg.gridDim = dim3(clusters * cluster);
  auto launch = [&] { CK(cudaLaunchKernelEx(&cfg, kernel, a, o, strips, clusters)); };
  CK(cudaMemset(o, 0, sizeof(float) * kRows * kCols));
  launch();
  CK(cudaMemset(diff, 0, sizeof *diff));
  count_differences<<<1024, 256>>>(reinterpret_cast<const unsigned*>(o),
                                   reinterpret_cast<const unsigned*>(ref),
                                   static_cast<std::size_t>(kRows) * kCols, diff);
  unsigned long long d = 0;
  CK(cudaMemcpy(&d, diff, sizeof d, cudaMemcpyDeviceToHost));
  const double ms = median_ms(launch);
  const double rate = 2.0 * kRows * kCols * 4 / ms / 1e6;
  std::printf("| %s | %d | %d | %.3f | %.1f %% | %llu |\n", name, active, clusters, ms,
              100.0 * rate / c_rate, d);
}

}  // namespace

int main() {
  const std::size_t n = static_cast<std::size_t>(kRows) * kCols;
  float *a, *o, *ref, *mx;
  unsigned long long* diff;
  CK(cudaMalloc(&a, n * 4));
  CK(cudaMalloc(&o, n * 4));
  CK(cudaMalloc(&ref, n * 4));
  CK(cudaMalloc(&mx, kCols * 4));
  CK(cudaMalloc(&diff, sizeof *diff));
  fill_random<<<1024, 256>>>(a, n);
  column_max_reference<<<kCols / 256, 256>>>(a, mx);
  subtract_reference<<<static_cast<unsigned>(n / 256), 256>>>(a, mx, ref);
  CK(cudaDeviceSynchronize());
  const double copy_ms =
      median_ms([&] { CK(cudaMemcpyAsync(o, a, n * 4, cudaMemcpyDeviceToDevice)); });
  const double c_rate = 2.0 * n * 4 / copy_ms / 1e6;
  const double two_ms = median_ms([&] {
    column_max_reference<<<kCols / 256, 256>>>(a, mx);
    subtract_reference<<<static_cast<unsigned>(n / 256), 256>>>(a, mx, o);
  });
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, C = %.0f GB/s (copy %.3f ms); naive two kernels %.3f ms\n\n", prop.name, c_rate,
              copy_ms, two_ms);
  std::printf(
      "| variant (strip cols, cluster, threads, reg+smem chunks) | clusters active | "
      "launched | ms | of C | bits differing |\n|---|---|---|---|---|---|\n");
  // 128 columns (512 B segments), cluster 8, one 1024-thread block an SM.
  run_variant<128, 1024, 4, 12, true, false>("128, 8, 1024, 4+12 async", 8, false, a, o, ref, diff,
                                             c_rate);
  run_variant<128, 1024, 4, 12, true, false>("128, 8, 1024, 4+12 async, persistent", 8, true, a, o,
                                             ref, diff, c_rate);
  run_variant<128, 1024, 4, 12, true, true>("128, 8, 1024, 4+12 async, persistent, .cs", 8, true, a,
                                            o, ref, diff, c_rate);
  run_variant<128, 1024, 4, 12, false, false>("128, 8, 1024, 4+12 plain, persistent", 8, true, a, o,
                                              ref, diff, c_rate);
  run_variant<128, 1024, 8, 8, true, false>("128, 8, 1024, 8+8 async, persistent", 8, true, a, o,
                                            ref, diff, c_rate);
  // 256 columns (1 KiB segments), cluster 16 (non-portable).
  run_variant<256, 1024, 4, 12, true, false>("256, 16, 1024, 4+12 async", 16, false, a, o, ref,
                                             diff, c_rate);
  run_variant<256, 1024, 4, 12, true, false>("256, 16, 1024, 4+12 async, persistent", 16, true, a,
                                             o, ref, diff, c_rate);
  // 64 columns (256 B segments), cluster 8, two 512-thread blocks an SM.
  run_variant<64, 512, 4, 12, true, false>("64, 8, 512, 4+12 async", 8, false, a, o, ref, diff,
                                           c_rate);
  run_variant<64, 512, 4, 12, true, false>("64, 8, 512, 4+12 async, persistent", 8, true, a, o, ref,
                                           diff, c_rate);
  // 128 columns over a cluster of 16 blocks of 512 threads, two an SM.
  run_variant<128, 512, 4, 12, true, false>("128, 16, 512, 4+12 async", 16, false, a, o, ref, diff,
                                            c_rate);
  run_variant<128, 512, 4, 12, true, false>("128, 16, 512, 4+12 async, persistent", 16, true, a, o,
                                            ref, diff, c_rate);
  return 0;
}
