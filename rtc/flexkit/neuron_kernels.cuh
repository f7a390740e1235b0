// Device helpers of the generated FlexSN step kernels (src/codegen/cuda_step_kernel_source.cpp):
// streaming loads and stores of V neighbouring neurons' elements as one vector word. Sequences
// are read and written once, so they bypass caching (ld/st.global.cs).
#pragma once
#include "flexkit/expr_kernels.cuh"

namespace flexkit::rtc {

template <int V, class T>
__device__ __forceinline__ void ldcs_lanes(const T* p, T (&out)[V]) {
  typedef typename VectorWord<V* int(sizeof(T))>::type Word;
  union {
    Word w;
    T t[V];
  } u;
  u.w = __ldcs(reinterpret_cast<const Word*>(p));
#pragma unroll
  for (int l = 0; l < V; ++l) out[l] = u.t[l];
}

// Read through the cache instead: values several threads read (a max pool's window).
template <int V, class T>
__device__ __forceinline__ void ldg_lanes(const T* p, T (&out)[V]) {
  typedef typename VectorWord<V* int(sizeof(T))>::type Word;
  union {
    Word w;
    T t[V];
  } u;
  u.w = __ldg(reinterpret_cast<const Word*>(p));
#pragma unroll
  for (int l = 0; l < V; ++l) out[l] = u.t[l];
}

// V <= 4 neighbouring u8 values as the bytes of one word (lane l in byte l), through the cache.
template <int V>
__device__ __forceinline__ unsigned ldg_byte_lanes(const uint8_t* p) {
  if constexpr (V == 4)
    return __ldg(reinterpret_cast<const unsigned*>(p));
  else if constexpr (V == 2)
    return __ldg(reinterpret_cast<const unsigned short*>(p));
  else
    return __ldg(p);
}

// x / d for a neuron index x: a multiply-high where every index fits 31 bits (a 64-bit
// division is a long instruction sequence, and a step kernel's prologue has several).
__device__ __forceinline__ int64_t quotient(int64_t x, int64_t d, IndexDivider divider,
                                            bool index32) {
  return index32 ? int64_t(divide_index(uint32_t(x), divider)) : x / d;
}

// A max pool's window of K2 taps, each the bytes of up to four lanes' u8 values: 0xff in the
// bytes where tap `self` is the first to hold its lane's maximum, else 0 - the rule of
// portable::pool_first_max_gradient on bytes, four lanes per instruction, in registers.
template <int K2>
__device__ __forceinline__ unsigned first_max_bytes(const unsigned (&taps)[K2], int self) {
  unsigned top = taps[0];
#pragma unroll
  for (int u = 1; u < K2; ++u) top = __vmaxu4(top, taps[u]);
  unsigned earlier = 0u, first = 0u;
#pragma unroll
  for (int u = 0; u < K2; ++u) {
    const unsigned holds = __vcmpeq4(taps[u], top);
    first = u == self ? holds & ~earlier : first;
    earlier |= holds;
  }
  return first;
}

template <int V, class T>
__device__ __forceinline__ void stcs_lanes(T* p, const T (&in)[V]) {
  typedef typename VectorWord<V* int(sizeof(T))>::type Word;
  union {
    Word w;
    T t[V];
  } u;
#pragma unroll
  for (int l = 0; l < V; ++l) u.t[l] = in[l];
  __stcs(reinterpret_cast<Word*>(p), u.w);
}

}  // namespace flexkit::rtc
