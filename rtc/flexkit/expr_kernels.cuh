// Device code shared by every generated expression kernel (src/codegen/cuda_expr_emit.cpp,
// cuda_row_fused_source.cpp): the kernel parameter structs, vector access, flex16 statistics
// and the reduction policies. Generated kernels are thin shells around these.
#pragma once
#include "flexkit/portable/ew_ops.hpp"
#include "flexkit/rtc_prelude.cuh"

namespace flexkit::rtc {

using namespace ::flexkit::portable;

// Kernel parameter structs, declared the same way in src/codegen/cuda_expr_source.hpp; every
// generated program static_asserts their sizes against the host's.
struct ExprOperand {
  const void* data;
  int32_t iwl;
  int32_t reserved;
  int64_t red_stride;
  StridedLayout layout;
};
struct ExprArgs {
  int64_t n;
  int64_t k;
  int64_t seg;
  int64_t splits;
  int64_t vec;
  int64_t grid_x;
  int64_t shape[kLayoutMaxRank];
  int32_t rank;
  int32_t block_x;
  uint64_t seed;
  IndexDivider dividers[kLayoutMaxRank];
};
struct ExprStats {
  int max_abs_m;
  unsigned arrivals;  // blocks that committed, for the in-kernel publication
  unsigned long long saturated;
  unsigned long long nan_count;
  ExprStats* host;  // mapped pinned memory the last block publishes into (null: none)
};
struct ExprArgPartial {
  float value;
  int32_t reserved;
  int64_t index;
};

// Vector access: E consecutive elements moved as the widest words their size allows (16-byte
// words for 4 f32, 8 bf16/flex16 or 16 u8). The address must be aligned to the word size.
template <int kBytes>
struct VectorWord;
template <>
struct VectorWord<16> {
  typedef uint4 type;
};
template <>
struct VectorWord<8> {
  typedef uint2 type;
};
template <>
struct VectorWord<4> {
  typedef unsigned int type;
};
template <>
struct VectorWord<2> {
  typedef unsigned short type;
};
template <>
struct VectorWord<1> {
  typedef unsigned char type;
};

template <class T, int E>
__device__ __forceinline__ void load_vector(const T* p, T (&out)[E]) {
  constexpr int kBytes = E * int(sizeof(T));
  constexpr int kWordBytes = kBytes < 16 ? kBytes : 16;
  typedef typename VectorWord<kWordBytes>::type Word;
  union {
    Word w[kBytes / kWordBytes];
    T t[E];
  } u;
  const Word* q = reinterpret_cast<const Word*>(p);
#pragma unroll
  for (int i = 0; i < kBytes / kWordBytes; ++i) u.w[i] = q[i];
#pragma unroll
  for (int i = 0; i < E; ++i) out[i] = u.t[i];
}

template <class T, int E>
__device__ __forceinline__ void store_vector(T* p, const T (&in)[E]) {
  constexpr int kBytes = E * int(sizeof(T));
  constexpr int kWordBytes = kBytes < 16 ? kBytes : 16;
  typedef typename VectorWord<kWordBytes>::type Word;
  union {
    Word w[kBytes / kWordBytes];
    T t[E];
  } u;
#pragma unroll
  for (int i = 0; i < E; ++i) u.t[i] = in[i];
  Word* q = reinterpret_cast<Word*>(p);
#pragma unroll
  for (int i = 0; i < kBytes / kWordBytes; ++i) q[i] = u.w[i];
}

// flex16 stores: each thread counts what it stored; the block combines the counts and issues
// one atomic of each kind.
struct StatsLocal {
  int max_abs_m;
  unsigned long long saturated;
  unsigned long long nan_count;
};

__device__ __forceinline__ int16_t encode_flex16(float v, int iwl, StatsLocal& s) {
  const Flex16Code c = flex16_encode(v, iwl);
  const int m = c.m < 0 ? -int(c.m) : int(c.m);
  s.max_abs_m = m > s.max_abs_m ? m : s.max_abs_m;
  s.saturated += c.saturated ? 1ull : 0ull;
  s.nan_count += is_nan(v) ? 1ull : 0ull;
  return c.m;
}

// Seeded stochastic rounding: the element at `offset` from the target view's first element draws
// its number from (seed, offset), as the CPU interpreter does.
__device__ __forceinline__ int16_t encode_flex16_sr(float v, int iwl, uint64_t seed, int64_t offset,
                                                    StatsLocal& s) {
  const Flex16Code c =
      flex16_encode_stochastic(static_cast<double>(v), iwl, seed, static_cast<uint64_t>(offset));
  const int m = c.m < 0 ? -int(c.m) : int(c.m);
  s.max_abs_m = m > s.max_abs_m ? m : s.max_abs_m;
  s.saturated += c.saturated ? 1ull : 0ull;
  s.nan_count += is_nan(v) ? 1ull : 0ull;
  return c.m;
}

__device__ __forceinline__ StatsLocal warp_stats(StatsLocal s) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const int m = __shfl_down_sync(0xffffffffu, s.max_abs_m, off);
    s.max_abs_m = m > s.max_abs_m ? m : s.max_abs_m;
    s.saturated += __shfl_down_sync(0xffffffffu, s.saturated, off);
    s.nan_count += __shfl_down_sync(0xffffffffu, s.nan_count, off);
  }
  return s;
}

// Every thread of the `blocks` blocks that write the output calls it once (block sizes are
// multiples of 32); the last block to commit publishes. A block that commits several outputs
// syncs its threads between the calls (they share `block_stats`).
__device__ __forceinline__ void commit_stats(StatsLocal s, ExprStats* out, unsigned blocks) {
  __shared__ StatsLocal block_stats[32];
  s = warp_stats(s);
  const int t = threadIdx.x;
  const int warps = (blockDim.x + 31) >> 5;
  if ((t & 31) == 0) block_stats[t >> 5] = s;
  __syncthreads();
  if (t < 32) {
    StatsLocal zero = {0, 0ull, 0ull};
    s = warp_stats(t < warps ? block_stats[t] : zero);
    if (t == 0) {
      if (s.max_abs_m > 0) atomicMax(&out->max_abs_m, s.max_abs_m);
      if (s.saturated) atomicAdd(&out->saturated, s.saturated);
      if (s.nan_count) atomicAdd(&out->nan_count, s.nan_count);
      // The last block to commit copies the record into the host's mapped memory and sets it
      // back to zero, so no publish kernel has to follow the write.
      ExprStats* host = out->host;
      if (host != nullptr) {
        __threadfence();
        if (atomicAdd(&out->arrivals, 1u) == blocks - 1) {
          __threadfence();
          host->max_abs_m = atomicExch(&out->max_abs_m, 0);
          host->saturated = atomicExch(&out->saturated, 0ull);
          host->nan_count = atomicExch(&out->nan_count, 0ull);
          out->arrivals = 0;
          __threadfence_system();
        }
      }
    }
  }
}

// Every thread of every block calls it once: every block of the grid writes the output.
__device__ __forceinline__ void commit_stats(StatsLocal s, ExprStats* out) {
  commit_stats(s, out, gridDim.x * gridDim.y * gridDim.z);
}

// ---- reductions: identity, per-element value, an associative combine and the final value -----
// Sums accumulate in double: free for a memory-bound kernel, and close to the CPU backend.
__device__ __forceinline__ float shfl_down(float v, int off, int width) {
  return __shfl_down_sync(0xffffffffu, v, off, width);
}
__device__ __forceinline__ double shfl_down(double v, int off, int width) {
  return __shfl_down_sync(0xffffffffu, v, off, width);
}
__device__ __forceinline__ ExprArgPartial shfl_down(ExprArgPartial v, int off, int width) {
  v.value = __shfl_down_sync(0xffffffffu, v.value, off, width);
  v.index = __shfl_down_sync(0xffffffffu, v.index, off, width);
  return v;
}

struct ReduceSum {
  typedef double Acc;
  static __device__ __forceinline__ Acc identity() { return 0.0; }
  static __device__ __forceinline__ Acc element(float v, int64_t) { return double(v); }
  static __device__ __forceinline__ Acc combine(Acc a, Acc b) { return a + b; }
  static __device__ __forceinline__ float value(Acc a, int64_t) { return float(a); }
};
struct ReduceMean : ReduceSum {
  static __device__ __forceinline__ float value(Acc a, int64_t count) {
    return float(a / double(count));
  }
};
struct ReduceMax {
  typedef float Acc;
  static __device__ __forceinline__ Acc identity() { return bits_to_float(0xff800000u); }
  static __device__ __forceinline__ Acc element(float v, int64_t) { return v; }
  static __device__ __forceinline__ Acc combine(Acc a, Acc b) { return ew_maximum(a, b); }
  static __device__ __forceinline__ float value(Acc a, int64_t) { return a; }
};
struct ReduceMin {
  typedef float Acc;
  static __device__ __forceinline__ Acc identity() { return bits_to_float(0x7f800000u); }
  static __device__ __forceinline__ Acc element(float v, int64_t) { return v; }
  static __device__ __forceinline__ Acc combine(Acc a, Acc b) { return ew_minimum(a, b); }
  static __device__ __forceinline__ float value(Acc a, int64_t) { return a; }
};
// A NaN is the extreme (the first NaN wins, as in NumPy); ties go to the lowest index. The
// combine only compares (value, index) pairs, so any combining order gives the same result.
template <bool kMax>
struct ReduceArg {
  typedef ExprArgPartial Acc;
  static __device__ __forceinline__ Acc identity() {
    Acc a;
    a.value = bits_to_float(kMax ? 0xff800000u : 0x7f800000u);
    a.reserved = 0;
    a.index = 0x7fffffffffffffffll;
    return a;
  }
  static __device__ __forceinline__ Acc element(float v, int64_t i) {
    Acc a;
    a.value = v;
    a.reserved = 0;
    a.index = i;
    return a;
  }
  static __device__ __forceinline__ Acc combine(Acc a, Acc b) {
    const bool an = is_nan(a.value), bn = is_nan(b.value);
    if (an != bn) return an ? a : b;
    if (!an && a.value != b.value) return (kMax ? a.value > b.value : a.value < b.value) ? a : b;
    return a.index <= b.index ? a : b;
  }
  static __device__ __forceinline__ float value(Acc a, int64_t) { return float(a.index); }
};

// Combines the `bx` consecutive threads of one row; the result is valid in the row's first
// thread. Rows narrower than a warp share warps (bx divides 32); wider rows fill the block and
// meet in shared memory. The order is fixed by the launch shape alone.
template <class R>
__device__ __forceinline__ typename R::Acc reduce_row(typename R::Acc acc, int bx) {
  __shared__ typename R::Acc warp_acc[32];
  const int width = bx < 32 ? bx : 32;
  for (int off = width >> 1; off > 0; off >>= 1) acc = R::combine(acc, shfl_down(acc, off, width));
  if (bx <= 32) return acc;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_acc[warp] = acc;
  __syncthreads();
  if (warp == 0) {
    acc = lane < (bx >> 5) ? warp_acc[lane] : R::identity();
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc = R::combine(acc, shfl_down(acc, off, 32));
  }
  return acc;
}

// The value `v` of the row's first thread, in every thread of the row (rows of bx threads, as
// in reduce_row). Every thread of the block calls it.
__device__ __forceinline__ float broadcast_row(float v, int bx) {
  __shared__ float first;
  if (bx <= 32) return __shfl_sync(0xffffffffu, v, 0, bx);
  if (threadIdx.x == 0) first = v;
  __syncthreads();
  const float r = first;
  __syncthreads();
  return r;
}

// Columns: a warp's 32 lanes hold 32 neighbouring columns and the block's warps split them.
// Combines the warps' partials of each lane's column in warp order: valid in warp 0. Every
// thread of the block calls it.
template <class R>
__device__ __forceinline__ typename R::Acc reduce_columns(typename R::Acc acc) {
  __shared__ typename R::Acc part[32][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  if (warps == 1) return acc;
  part[warp][lane] = acc;
  __syncthreads();
  if (warp == 0)
    for (int w = 1; w < warps; ++w) acc = R::combine(acc, part[w][lane]);
  return acc;
}

// Warp 0's value `v` of each lane's column, in every warp. Every thread of the block calls it.
__device__ __forceinline__ float broadcast_columns(float v) {
  __shared__ float column[32];
  if (threadIdx.x < 32) column[threadIdx.x] = v;
  __syncthreads();
  const float r = column[threadIdx.x & 31];
  __syncthreads();
  return r;
}

// Column strips: a block's threads hold kV neighbouring columns each, kTpr threads across the
// block's kTpr * kV columns and one row position of 32 a thread (kThreads = 32 * kTpr). Combines
// the partials `acc` (one a column the thread holds) of each column over the 32 row positions in
// a fixed tree order: column h of the block (h = tx * kV + v) is valid in thread h. Every thread
// of the block calls it.
template <class R, int kV, int kThreads, int kTpr>
__device__ __forceinline__ typename R::Acc reduce_strip(const typename R::Acc (&acc)[kV]) {
  static_assert(kThreads == 32 * kTpr, "a warp's lanes span a column's row positions");
  constexpr int kHolders = kTpr * kV, kWarps = kThreads / 32;
  __shared__ typename R::Acc part[kV][kThreads];
  __shared__ typename R::Acc column[kHolders];
  const int t = static_cast<int>(threadIdx.x), lane = t & 31, warp = t >> 5;
#pragma unroll
  for (int v = 0; v < kV; ++v) part[v][t] = acc[v];
  __syncthreads();
  for (int h = warp; h < kHolders; h += kWarps) {
    // Lane l holds row position l of column h.
    typename R::Acc x = part[h % kV][lane * kTpr + h / kV];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) x = R::combine(x, shfl_down(x, off, 32));
    if (lane == 0) column[h] = x;
  }
  __syncthreads();
  const typename R::Acc out = t < kHolders ? column[t] : R::identity();
  __syncthreads();  // `part` and `column` are reused by the next reduction of this type
  return out;
}

// Thread h < kTpr * kV's value `v` (column h of the block) in every thread holding that column:
// out[v] is column tx * kV + v's. Every thread of the block calls it.
template <class T, int kV, int kTpr>
__device__ __forceinline__ void broadcast_strip(T v, T (&out)[kV]) {
  __shared__ T column[kTpr * kV];
  const int t = static_cast<int>(threadIdx.x);
  if (t < kTpr * kV) column[t] = v;
  __syncthreads();
#pragma unroll
  for (int e = 0; e < kV; ++e) out[e] = column[(t % kTpr) * kV + e];
  __syncthreads();
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
// Asynchronous copies of a 4-, 8- or 16-byte word from global into shared memory: the column
// strips keep most of what they hold in shared memory, and these let every row of it be in
// flight at once without passing through registers.
template <class H>
__device__ __forceinline__ void copy_async(H* shared, const void* global) {
  static_assert(sizeof(H) == 4 || sizeof(H) == 8 || sizeof(H) == 16, "cp.async sizes");
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(shared));
  if constexpr (sizeof(H) == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(global) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(s), "l"(global),
                 "n"(static_cast<int>(sizeof(H)))
                 : "memory");
}
__device__ __forceinline__ void copy_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// The calling thread's copies have landed (each thread reads back only its own words).
__device__ __forceinline__ void copy_async_wait() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}
#endif

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// ---- clusters: blocks sharing a row exchange partials in distributed shared memory ------------
// Every thread of every block of the cluster executes these (the .aligned forms).
__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// `local`'s counterpart in the shared memory of the cluster's block `rank`.
template <class T>
__device__ __forceinline__ T load_cluster_shared(const T* local, int rank) {
  static_assert(sizeof(T) % 4 == 0, "read as 32-bit words");
  const uint32_t address = static_cast<uint32_t>(__cvta_generic_to_shared(local));
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(address), "r"(rank));
  T out;
  uint32_t* words = reinterpret_cast<uint32_t*>(&out);
#pragma unroll
  for (int w = 0; w < static_cast<int>(sizeof(T) / 4); ++w)
    asm volatile("ld.shared::cluster.u32 %0, [%1];\n" : "=r"(words[w]) : "r"(remote + 4u * w));
  return out;
}

// Combines the partials of the cluster's `blocks` blocks in rank order, so that every block gets
// the same values: thread t < holders of each block holds partial t (one for a row, as
// reduce_row leaves it in thread 0; one a lane for columns, as reduce_columns leaves them in
// warp 0) and gets the combined value. `part` (holders values) is shared memory of this
// reduction alone: a block may still be reading it when its owner reaches the next reduction.
template <class R>
__device__ __forceinline__ typename R::Acc reduce_cluster(typename R::Acc acc,
                                                          typename R::Acc* part, int blocks,
                                                          int holders) {
  const int t = static_cast<int>(threadIdx.x);
  if (t < holders) part[t] = acc;
  cluster_arrive();
  cluster_wait();
  if (t >= holders) return acc;
  typename R::Acc total = load_cluster_shared(part + t, 0);
  for (int r = 1; r < blocks; ++r) total = R::combine(total, load_cluster_shared(part + t, r));
  return total;
}
#endif

}  // namespace flexkit::rtc
