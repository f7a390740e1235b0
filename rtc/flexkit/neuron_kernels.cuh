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
