// The memory ceiling of the shallow convolution kernel's traffic (gemm_shallow_specialized.cuh),
// with no arithmetic: the 1x1 56x56 N64 patterns. 132 persistent CTAs over the output's tile
// rows; each CTA walks every 66th (or 132nd) column tile, streams the B rows × TN int16 tile
// through a cp.async ring and writes its output tile with 16-byte stores, warp w rows
// w · tile_rows / 8 onwards. The C64 K256 fprop pattern (64 B rows in, 256 output rows) and the
// C256 K64 fprop pattern (256 in, 64 out) are measured, with variants of the tile shape, rows per
// store instruction, cache hints on the stores (streaming .cs, L2 evict_first) and on B's reads
// (L2 evict_last), a row stride padded past the 56 · 56 · 64 columns (which is 49 · 8192 bytes),
// the order in which a CTA takes its tiles, the same bytes written as flat 1-D ranges, and the
// read-heavy bytes in the four-stage kernel's 16 KB stages through rings of 4 to 12 slots, by
// cp.async or by bulk tensor loads (2-D boxes, or the kernel's 4-D boxes of BoxS16Split). Each
// variant's time is the median of three rounds of 20 launches (CUDA events), beside the
// device-to-device copy rate C (cudaMemcpyAsync of 1 GiB, bytes read + written) measured in the
// same process. The Markdown table goes to stdout.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "backend/cuda/gemm/tensor_map_encoder.hpp"
#include "backend/cuda/gemm/tma_pipeline.cuh"

#define CK(x)                                             \
  do {                                                    \
    cudaError_t e = (x);                                  \
    if (e != cudaSuccess) {                               \
      std::printf("%s: %s\n", #x, cudaGetErrorString(e)); \
      return -1.0;                                        \
    }                                                     \
  } while (0)

namespace {

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
// One traffic pattern. b_rows: B's rows read per column tile (0: none); o_rows: output rows
// (the output's tile rows split them); tn: columns per tile; rows_per_store: output rows one
// warp store instruction covers (4: 8 lanes × 16 B per 128-byte half row, as the kernel);
// store: 0 plain, 1 .cs, 2 L2 evict_first; read_hint: B's reads evict_last; pad: elements added
// to every row's stride; contiguous: each CTA takes a contiguous run of column tiles instead of
// every (CTAs per tile row)-th.
struct Pattern {
  int b_rows = 64;
  int o_rows = 256;
  int tile_rows = 128;
  int tn = 128;
  int rows_per_store = 4;
  int store = 0;
  bool read_hint = false;
  int pad = 0;
  bool contiguous = false;
};

__host__ __device__ constexpr int slot_bytes(Pattern p) {
  return p.b_rows * p.tn * 2;
}
// As many slots as fit in 192 KB, at most six.
__host__ __device__ constexpr int ring_slots(Pattern p) {
  return p.b_rows == 0 ? 2 : (6 * slot_bytes(p) <= 196608 ? 6 : 196608 / slot_bytes(p));
}

// (A kernel template takes the pattern's fields one by one: nvcc's host stubs cannot name a
// class-type template argument.)
template <int kBRows, int kORows, int kTileRows, int kTN, int kRowsPerStore, int kStore,
          bool kReadHint, int kPad, bool kContiguous>
__global__ void __launch_bounds__(256, 1)
    pattern(const int16_t* __restrict__ b, int16_t* __restrict__ o, int64_t n, int tiles_n) {
  constexpr Pattern kP{kBRows, kORows,    kTileRows, kTN,        kRowsPerStore,
                       kStore, kReadHint, kPad,      kContiguous};
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int kRing = ring_slots(kP);
  constexpr bool kRead = kP.b_rows > 0;
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  constexpr int kSlot = slot_bytes(kP);
  constexpr int kChunksPerRow = kP.tn / 8;
  constexpr int kChunks = kP.b_rows * kChunksPerRow / 256;  // per thread
  const int64_t stride = n + kP.pad;
  const int tiles_m = kP.o_rows / kP.tile_rows;
  const int tm = blockIdx.x % tiles_m, cpr = gridDim.x / tiles_m, first = blockIdx.x / tiles_m;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  // Tile i of this CTA: every cpr-th from `first`, or a contiguous run of `per_cta`.
  const int per_cta = (tiles_n + cpr - 1) / cpr;
  const int count = kP.contiguous ? max(0, min(per_cta, tiles_n - first * per_cta))
                                  : (first < tiles_n ? (tiles_n - first + cpr - 1) / cpr : 0);
  auto tile_col = [&](int i) {
    return int64_t(kP.contiguous ? first * per_cta + i : first + i * cpr) * kP.tn;
  };
  uint64_t store_policy, read_policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(store_policy));
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(read_policy));
  auto issue = [&](int i) {
    if (kRead && i < count) {
      const int64_t col0 = tile_col(i);
      const uint32_t slot = base + (i % kRing) * kSlot;
#pragma unroll
      for (int j = 0; j < kChunks; ++j) {
        const int c = threadIdx.x + 256 * j, row = c / kChunksPerRow, ch = c % kChunksPerRow;
        if constexpr (kReadHint) {
          cp16_hint(slot + 16 * c, b + row * stride + col0 + 8 * ch, read_policy);
        } else {
          cp16(slot + 16 * c, b + row * stride + col0 + 8 * ch);
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
    const int64_t col0 = tile_col(i);
    // Warp w writes rows (tile_rows / 8)·w onwards, all tn columns.
    constexpr int kLanesPerRow = 32 / kP.rows_per_store;
    constexpr int kSegments = kP.tn / (8 * kLanesPerRow);  // per row
#pragma unroll
    for (int seg = 0; seg < kSegments; ++seg) {
#pragma unroll
      for (int k = 0; k < kP.tile_rows / 8 / kP.rows_per_store; ++k) {
        const int r = kP.rows_per_store * k + lane / kLanesPerRow;
        const int64_t row = int64_t(tm) * kP.tile_rows + (kP.tile_rows / 8) * warp + r;
        store16<kStore>(o + row * stride + col0 + 8 * (kLanesPerRow * seg + lane % kLanesPerRow),
                        acc, store_policy);
      }
    }
  }
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

// The staged patterns' output tile: 64 rows × 128 columns from column col0, warp w rows 8w …
// 8w + 7, four rows of 128 bytes per store, L2 evict_first.
__device__ __forceinline__ void store_staged_tile(int16_t* o, int64_t n, int64_t col0, int4 v,
                                                  uint64_t policy) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
  for (int seg = 0; seg < 2; ++seg) {
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int64_t row = 8 * warp + 4 * k + lane / 8;
      store16<2>(o + row * n + col0 + 8 * (8 * seg + lane % 8), v, policy);
    }
  }
}

// The read-heavy pattern as the four-stage kernel moves it: a column tile of 128 columns is
// four stages of 64 B rows (16 KB each, through a ring of kRing such slots, kRing − 1 in flight),
// then 64 output rows (8 a warp, 4 rows per store, L2 evict_first).
template <int kRing>
__global__ void __launch_bounds__(256, 1)
    staged_read(const int16_t* __restrict__ b, int16_t* __restrict__ o, int64_t n, int tiles_n) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int kSlot = 64 * 128 * 2, kStages = 4;
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int count = blockIdx.x < tiles_n ? (tiles_n - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  const int total = count * kStages;
  uint64_t store_policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(store_policy));
  auto issue = [&](int i) {
    if (i < total) {
      const int64_t col0 = int64_t(blockIdx.x + (i / kStages) * gridDim.x) * 128;
      const int row0 = 64 * (i % kStages);
      const uint32_t slot = base + (i % kRing) * kSlot;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int c = threadIdx.x + 256 * j, row = c / 16, ch = c % 16;
        cp16(slot + 16 * c, b + (row0 + row) * n + col0 + 8 * ch);
      }
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  };
  for (int i = 0; i < kRing - 1; ++i) issue(i);
  int4 acc = make_int4(lane, warp, 0, 1);
  for (int i = 0; i < total; ++i) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kRing - 2) : "memory");
    __syncthreads();
    issue(i + kRing - 1);
    const int4 v = reinterpret_cast<const int4*>(smem + (i % kRing) * kSlot)[threadIdx.x];
    acc.x ^= v.x;
    acc.y ^= v.y;
    if (i % kStages == kStages - 1)
      store_staged_tile(o, n, int64_t(blockIdx.x + (i / kStages) * gridDim.x) * 128, acc,
                        store_policy);
  }
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}
template <int kRing>
double staged_ms(const int16_t* b, int16_t* o, int64_t n) {
  const int smem = kRing * 64 * 128 * 2;
  auto k = staged_read<kRing>;
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const int tiles_n = static_cast<int>(n / 128);
  return time_launches([&] { k<<<132, 256, smem>>>(b, o, n, tiles_n); });
}

// The same stages through bulk tensor loads, as the kernel takes B where it is a plain matrix:
// thread 0 loads each 16 KB stage as two boxes of 64 columns on its slot's barrier (kFourD: the
// kernel's 4-D boxes of k-row 16·q + 2·h + b, 128-byte swizzle; else 2-D boxes of 64 rows).
namespace gk = flexkit::backend::cuda::gemm_kernels;
template <int kRing, bool kFourD>
__global__ void __launch_bounds__(256, 1)
    staged_bulk_read(const __grid_constant__ CUtensorMap map, int16_t* __restrict__ o, int64_t n,
                     int tiles_n) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ uint64_t barriers[kRing];
  constexpr int kSlot = 64 * 128 * 2, kStages = 4;
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t base = raw + ((1024u - (raw & 1023u)) & 1023u);
  const uint32_t bar = gk::tma::shared_address(barriers);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int count = blockIdx.x < tiles_n ? (tiles_n - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  const int total = count * kStages;
  uint64_t store_policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(store_policy));
  if (threadIdx.x == 0) {
    for (int s = 0; s < kRing; ++s) gk::tma::barrier_init(bar + 8 * s, 1);
    gk::tma::barrier_init_fence();
  }
  __syncthreads();
  auto issue = [&](int i) {
    if (threadIdx.x == 0 && i < total) {
      const int32_t col0 = (blockIdx.x + (i / kStages) * gridDim.x) * 128;
      const int stage = i % kStages;
      const uint32_t slot = base + (i % kRing) * kSlot, b = bar + 8 * (i % kRing);
      gk::tma::arrive_expect_bytes(b, kSlot);
      if constexpr (kFourD) {
        gk::tma::load_4d(slot, &map, col0, 0, 4 * stage, 0, b);
        gk::tma::load_4d(slot + kSlot / 2, &map, col0 + 64, 0, 4 * stage, 0, b);
      } else {
        gk::tma::load_2d(slot, &map, col0, 64 * stage, b);
        gk::tma::load_2d(slot + kSlot / 2, &map, col0 + 64, 64 * stage, b);
      }
    }
  };
  for (int i = 0; i < kRing - 1; ++i) issue(i);
  int4 acc = make_int4(lane, warp, 0, 1);
  for (int i = 0; i < total; ++i) {
    gk::tma::wait(bar + 8 * (i % kRing), (i / kRing) & 1);
    __syncthreads();  // every thread is done with the slot of stage i − 1
    issue(i + kRing - 1);
    const int4 v =
        reinterpret_cast<const int4*>(smem + (base - raw) + (i % kRing) * kSlot)[threadIdx.x];
    acc.x ^= v.x;
    acc.y ^= v.y;
    if (i % kStages == kStages - 1)
      store_staged_tile(o, n, int64_t(blockIdx.x + (i / kStages) * gridDim.x) * 128, acc,
                        store_policy);
  }
}
template <int kRing, bool kFourD>
double staged_bulk_ms(const int16_t* b, int16_t* o, int64_t n) {
  const int smem = kRing * 64 * 128 * 2 + 1024;
  auto k = staged_bulk_read<kRing, kFourD>;
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CUtensorMap map;
  CUresult r;
  if (kFourD) {
    const cuuint64_t dims[4] = {cuuint64_t(n), 2, 16, 8};
    const cuuint64_t strides[3] = {cuuint64_t(n * 2), cuuint64_t(16 * n * 2),
                                   cuuint64_t(2 * n * 2)};
    const cuuint32_t box[4] = {64, 2, 4, 8}, element_strides[4] = {1, 1, 1, 1};
    r = gk::tensor_map_encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 4, const_cast<int16_t*>(b),
                                 dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                 CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  } else {
    const cuuint64_t dims[2] = {cuuint64_t(n), 256};
    const cuuint64_t strides[1] = {cuuint64_t(n * 2)};
    const cuuint32_t box[2] = {64, 64}, element_strides[2] = {1, 1};
    r = gk::tensor_map_encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, const_cast<int16_t*>(b),
                                 dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                 CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  }
  if (r != CUDA_SUCCESS) {
    std::printf("cuTensorMapEncodeTiled failed (%d)\n", int(r));
    return -1.0;
  }
  const int tiles_n = static_cast<int>(n / 128);
  return time_launches([&] { k<<<132, 256, smem>>>(map, o, n, tiles_n); });
}

// The same bytes as a pattern's output written as flat ranges (no tiles, no rows): CTA c writes
// 16-byte words c·256 + t, c·256 + t + 132·256, … (interleaved, as a fill kernel) or a contiguous
// 1/132 of them.
template <bool kContiguous>
__global__ void __launch_bounds__(256, 1) flat_write(int4* __restrict__ o, int64_t words) {
  const int4 v = make_int4(threadIdx.x, blockIdx.x, 0, 1);
  if (kContiguous) {
    const int64_t per = (words + gridDim.x - 1) / gridDim.x;
    const int64_t begin = per * blockIdx.x, end = min(words, begin + per);
    for (int64_t w = begin + threadIdx.x; w < end; w += 256) o[w] = v;
  } else {
    for (int64_t w = int64_t(blockIdx.x) * 256 + threadIdx.x; w < words; w += 256 * gridDim.x)
      o[w] = v;
  }
}

template <typename Launch>
double time_launches(Launch&& launch) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int w = 0; w < 3; ++w) launch();
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  const int reps = 20;
  CK(cudaEventRecord(e0));
  for (int r = 0; r < reps; ++r) launch();
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  CK(cudaGetLastError());
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return ms / reps;
}

// One variant's time per launch (ms), or a negative value on a CUDA error.
template <Pattern kP>
double time_ms(const int16_t* b, int16_t* o, int64_t n) {
  const int smem = ring_slots(kP) * slot_bytes(kP);
  auto k = pattern<kP.b_rows, kP.o_rows, kP.tile_rows, kP.tn, kP.rows_per_store, kP.store,
                   kP.read_hint, kP.pad, kP.contiguous>;
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const int tiles_n = static_cast<int>(n / kP.tn);
  return time_launches([&] { k<<<132, 256, smem>>>(b, o, n, tiles_n); });
}
template <int kORows, bool kContiguous>
double flat_ms(const int16_t*, int16_t* o, int64_t n) {
  const int64_t words = kORows * n * 2 / 16;
  return time_launches(
      [&] { flat_write<kContiguous><<<132, 256>>>(reinterpret_cast<int4*>(o), words); });
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
  int rows_moved;  // B rows read plus output rows written, each n int16
  double (*run)(const int16_t*, int16_t*, int64_t);
};

// The write-heavy pattern (1x1 C64 K256 fprop, C256 K64 bprop) and the read-heavy one (C256 K64
// fprop, C64 K256 bprop), the kernel's as it stands.
constexpr Pattern kWriteHeavy{};
constexpr Pattern kReadHeavy{.b_rows = 256, .o_rows = 64, .tile_rows = 64, .store = 2};
constexpr Pattern with_store(Pattern p, int store) {
  return p.store = store, p;
}
constexpr Pattern padded(Pattern p) {
  return p.pad = 64, p;
}
constexpr Pattern contiguous(Pattern p) {
  return p.contiguous = true, p;
}
constexpr Pattern no_reads(Pattern p) {
  return p.b_rows = 0, p;
}

}  // namespace

int main() {
  const int64_t n = 200704;  // 56 · 56 · 64 columns
  const int64_t padded_n = n + 64;
  int16_t *b = nullptr, *o = nullptr;
  if (cudaMalloc(&b, 256 * padded_n * 2) != cudaSuccess ||
      cudaMalloc(&o, 256 * padded_n * 2) != cudaSuccess ||
      cudaMemset(b, 1, 256 * padded_n * 2) != cudaSuccess) {
    std::printf("bench_shallow_traffic: device allocation failed\n");
    return 1;
  }
  const double copy_gbs = copy_rate_gbs();
  if (copy_gbs < 0) return 1;
  constexpr Pattern w = kWriteHeavy, wcs = with_store(kWriteHeavy, 1);
  constexpr Pattern r = kReadHeavy;
  const Variant variants[] = {
      {"W: B + O, 128 x 128 tiles, 4 rows per store", 320, time_ms<w>},
      {"W: B + O, 128 x 128 tiles, 2 rows per store", 320, time_ms<Pattern{.rows_per_store = 2}>},
      {"W: B + O, 128 x 256 tiles", 320, time_ms<Pattern{.tn = 256}>},
      {"W: B + O, 256 x 128 tiles (B read once)", 320, time_ms<Pattern{.tile_rows = 256}>},
      {"W: B + O, stores st.global.cs", 320, time_ms<wcs>},
      {"W: B + O, stores L2 evict_first", 320, time_ms<with_store(w, 2)>},
      {"W: B + O, B reads L2 evict_last", 320, time_ms<Pattern{.read_hint = true}>},
      {"W: B + O, .cs, row stride + 128 bytes", 320, time_ms<padded(wcs)>},
      {"W: B + O, .cs, contiguous tiles per CTA", 320, time_ms<contiguous(wcs)>},
      {"W: B + O, .cs, 64 x 128 tiles", 320, time_ms<Pattern{.tile_rows = 64, .store = 1}>},
      {"W: O only, plain stores", 256, time_ms<no_reads(w)>},
      {"W: O only, st.global.cs", 256, time_ms<no_reads(wcs)>},
      {"W: O only, .cs, row stride + 128 bytes", 256, time_ms<no_reads(padded(wcs))>},
      {"W: O only, .cs, contiguous tiles per CTA", 256, time_ms<no_reads(contiguous(wcs))>},
      {"W: O only, .cs, 128 x 256 tiles, 1 row (512 B) per store", 256,
       time_ms<Pattern{.b_rows = 0, .tn = 256, .rows_per_store = 1, .store = 1}>},
      {"W: O only, flat, interleaved 16-byte words", 256, flat_ms<256, false>},
      {"W: O only, flat, a contiguous range per CTA", 256, flat_ms<256, true>},
      {"R: B + O, 64 x 128 tiles, B 256 rows, evict_first stores", 320, time_ms<r>},
      {"R: B + O, as R, row stride + 128 bytes", 320, time_ms<padded(r)>},
      {"R: B + O, as R, contiguous tiles per CTA", 320, time_ms<contiguous(r)>},
      {"R: B + O, as R, 64 x 64 tiles", 320,
       time_ms<Pattern{.b_rows = 256, .o_rows = 64, .tile_rows = 64, .tn = 64, .store = 2}>},
      {"R: B + O in 16 KB stages of 64 B rows, 4 slots (3 in flight)", 320, staged_ms<4>},
      {"R: B + O in 16 KB stages of 64 B rows, 6 slots", 320, staged_ms<6>},
      {"R: B + O in 16 KB stages of 64 B rows, 8 slots", 320, staged_ms<8>},
      {"R: B + O in 16 KB stages of 64 B rows, 12 slots", 320, staged_ms<12>},
      {"R: as the 4 slots, bulk tensor loads of 2-D boxes (64 x 64)", 320,
       staged_bulk_ms<4, false>},
      {"R: as the 4 slots, bulk tensor loads of the kernel's 4-D boxes", 320,
       staged_bulk_ms<4, true>},
      {"R: as the 8 slots, bulk tensor loads of the kernel's 4-D boxes", 320,
       staged_bulk_ms<8, true>},
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
  std::printf(
      "| shallow kernel traffic, 1x1 56x56 (W: C64 K256 fprop, R: C256 K64 fprop) | ms | GB/s | "
      "of C |\n");
  std::printf("|---|---|---|---|\n");
  for (int v = 0; v < kVariants; ++v) {
    std::vector<double> t = times[v];
    std::sort(t.begin(), t.end());
    const double ms = t[1];
    const double bytes = double(variants[v].rows_moved) * n * 2;
    const double gbs = bytes / (ms * 1e-3) / 1e9;
    std::printf("| %s | %.4f | %.0f | %.2f |\n", variants[v].name, ms, gbs, gbs / copy_gbs);
  }
  cudaFree(b);
  cudaFree(o);
  return 0;
}
