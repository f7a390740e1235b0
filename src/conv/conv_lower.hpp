// Lowering a convolution operand into a GEMM operand block (im2col and its transposed-conv
// counterpart), shared by the CPU fprop, bprop and update. Zero padding, stride, dilation and
// upscale are resolved here, so the GEMM only ever sees plain matrices.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "conv/conv_cpu.hpp"

namespace flexkit::conv {

// Below this many lowered elements per worker a thread costs more than it saves.
inline constexpr std::int64_t kLowerElementsPerWorker = 16384;
// Bytes one lowered block may take; blocks are cut to stay within it.
inline constexpr std::int64_t kLoweredBlockBytes = std::int64_t{4} << 20;

template <typename T>
const T* operand_data(const Operand& x) {
  return static_cast<const T*>(x.data);
}

// dst[0..n) = src[0], src[stride], …
template <typename T>
void copy_run(T* dst, const T* src, std::int64_t stride, std::int64_t n) {
  if (stride == 1) {
    std::memcpy(dst, src, sizeof(T) * static_cast<std::size_t>(n));
  } else {
    for (std::int64_t i = 0; i < n; ++i) dst[i] = src[i * stride];
  }
}

template <typename T>
void zero_run(T* dst, std::int64_t n) {
  std::fill(dst, dst + n, T{});
}

// The input index (original, before upscaling) that output position o reads through tap t along
// spatial dim d, or −1 where it reads padding.
inline std::int64_t input_index(const Geometry& g, int d, std::int64_t o, std::int64_t t) {
  const std::int64_t x = o * g.str[d] - g.pad[d] + t * g.dil[d];
  if (x < 0 || x >= g.in[d] * g.up[d]) return -1;
  return x / g.up[d];
}

// The output index whose tap t reads upscaled input position i·up + u along dim d, or −1 where
// no output position does (the position falls between strides or outside the output).
inline std::int64_t output_index(const Geometry& g, int d, std::int64_t i, std::int64_t u,
                                 std::int64_t t) {
  const std::int64_t num = i * g.up[d] + u + g.pad[d] - t * g.dil[d];
  if (num < 0 || num % g.str[d] != 0) return -1;
  const std::int64_t o = num / g.str[d];
  return o < g.out[d] ? o : -1;
}

// The output positions q in [0, Q) whose tap s reads inside the input along the last dim: one
// contiguous range, since the input index grows with q.
inline std::pair<std::int64_t, std::int64_t> valid_outputs(const Geometry& g, std::int64_t s) {
  const std::int64_t first = -g.pad[2] + s * g.dil[2], limit = g.in[2] * g.up[2];
  const std::int64_t str = g.str[2];
  // q·str + first ≥ 0 and q·str + first < limit.
  const std::int64_t lo = first >= 0 ? 0 : (-first + str - 1) / str;
  const std::int64_t hi = limit - first <= 0 ? 0 : (limit - first - 1) / str + 1;
  return {std::min(lo, g.out[2]), std::clamp(hi, std::min(lo, g.out[2]), g.out[2])};
}

// Rows [r0, r1) of the lowered input, row = (c, t, r, s) in that order, columns = output
// positions [p0, p1) (row-major over M, P, Q) × N; row r0 starts at dst, rows are ld apart.
// Works one output row (m, p) at a time: padding becomes zero runs, and where consecutive q read
// consecutive input elements (stride and upscale 1 along W, W and N adjacent in memory) the
// valid part is a single copy.
template <typename T>
void lower_input(const Geometry& g, const Operand& in, std::int64_t r0, std::int64_t r1,
                 std::int64_t p0, std::int64_t p1, T* dst, std::int64_t ld) {
  const T* base = operand_data<T>(in);
  const std::int64_t taps = g.taps(), N = g.N;
  const std::int64_t P = g.out[1], Q = g.out[2];
  const bool runs = g.str[2] == 1 && g.up[2] == 1 && in.stride[4] == 1 && in.stride[3] == N;
  for (std::int64_t row = r0; row < r1; ++row) {
    const std::int64_t c = row / taps, tap = row % taps;
    const std::int64_t t = tap / (g.flt[1] * g.flt[2]), r = (tap / g.flt[2]) % g.flt[1],
                       s = tap % g.flt[2];
    const auto [qa, qb] = valid_outputs(g, s);
    T* out = dst + (row - r0) * ld;
    const T* channel = base + c * in.stride[0];
    for (std::int64_t pos = p0; pos < p1;) {
      const std::int64_t m = pos / (P * Q), p = (pos / Q) % P, q0 = pos % Q;
      const std::int64_t q1 = std::min(Q, q0 + (p1 - pos));  // this output row's part
      const std::int64_t x0 = input_index(g, 0, m, t), x1 = input_index(g, 1, p, r);
      if (x0 < 0 || x1 < 0) {
        zero_run(out, (q1 - q0) * N);
      } else {
        const T* src_row = channel + x0 * in.stride[1] + x1 * in.stride[2];
        const std::int64_t va = std::clamp(qa, q0, q1), vb = std::clamp(qb, va, q1);
        zero_run(out, (va - q0) * N);
        if (runs && vb > va) {
          const std::int64_t x2 = input_index(g, 2, va, s);
          copy_run(out + (va - q0) * N, src_row + x2 * in.stride[3], 1, (vb - va) * N);
        } else {
          for (std::int64_t q = va; q < vb; ++q)
            copy_run(out + (q - q0) * N, src_row + input_index(g, 2, q, s) * in.stride[3],
                     in.stride[4], N);
        }
        zero_run(out + (vb - q0) * N, (q1 - vb) * N);
      }
      out += (q1 - q0) * N;
      pos += q1 - q0;
    }
  }
}

}  // namespace flexkit::conv
