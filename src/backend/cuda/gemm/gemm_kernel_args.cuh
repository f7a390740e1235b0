// What every exact integer GEMM kernel (simple, wgmma, split-K finish) shares: the launch
// arguments as one POD and the per-element epilogue (a thin shell around the portable epilogue,
// the one definition of rounding). Statistics go through exact_stats_commit.cuh.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/exact_stats_commit.cuh"
#include "flexkit/portable/gemm_epilogue.hpp"

namespace flexkit::backend::cuda::gemm_kernels {

// One input operand seen as a "rows × k" matrix: A is m × k, B is passed transposed (n × k), so
// every kernel treats both operands alike. Element (r, k) of batch entry b lives at
// data + b·batch_stride + r·row_stride + k·k_stride (elements).
struct OperandView {
  const void* data;
  int64_t row_stride;
  int64_t k_stride;
  int64_t batch_stride;
};

struct OutputView {
  void* data;
  int64_t row_stride;
  int64_t col_stride;
  int64_t batch_stride;
};

// Whether an output's rows are its unit stride and its columns are not (update's gradF, k
// contiguous): passes over whole tiles then walk rows fastest, so that consecutive threads write
// consecutive elements (columns fastest, each warp's 32 two-byte writes fell in 32 sectors).
__host__ __device__ __forceinline__ bool rows_are_unit_stride(const OutputView& c) {
  return c.row_stride == 1 && c.col_stride != 1;
}

// An implicit-GEMM B (a convolution operand gathered in the kernel, never lowered in memory).
// The K range runs tap-major in stages of kWgmmaStageK channels: stage g covers channels
// [64·(g % channel_stages), …) of tap g / channel_stages, taps (t0, t1, t2) in row-major order.
// B's rows (the GEMM's columns) are (position, n): position (o0, o1, o2) over `out`, n over
// `batch`, n the gathered operand's unit stride. Channel c of a row reads the gathered operand at
// coordinate x_d = (o_d·out_step_d + base_d + t_d·tap_step_d) / divisor_d along each dim, or zero
// where x_d is outside [0, in_d) or the division is not exact (a strided convolution's gradient).
// A's k index is (tap, channel): element (row, tap, c) at
// a.data + row·a.row_stride + Σ_d t_d·a_tap_stride[d] + c·a.k_stride.
//
// The update form (a k-contiguous gathered B, the filter gradient): one tap per grid z (t from
// z in row-major order over `taps`); B's rows are channels (channel_stride apart) and its k index
// is (position, n) over `out` × `batch`, read at x_d = o_d·out_step_d + base_d + t_d·tap_step_d.
struct ConvGather {
  int32_t channels;        // per tap
  int32_t channel_stages;  // ceil(channels / kWgmmaStageK)
  int32_t taps[3];
  int32_t out[3];
  int32_t batch;
  int32_t in[3];
  int32_t out_step[3], base[3], tap_step[3], divisor[3];
  int64_t channel_stride;  // elements between channels of the gathered operand
  int64_t in_stride[3];    // elements per step of x_d
  int64_t a_tap_stride[3];
  int64_t b_block_step;      // 64 · channel_stride
  int64_t a_block_step;      // 64 · A's k stride
  int32_t strided_gradient;  // some divisor_d > 1
};

struct IntegerGemmArgs {
  int64_t m, n, k;
  OperandView a;  // int16 mantissas, m × k
  OperandView b;  // int16 mantissas or u8 bytes, n × k
  OutputView c;   // int16 or float, m × n
  portable::GemmEpilogue epilogue;
  int32_t b_is_u8;
  int32_t out_is_f32;
  int32_t measure;     // EpilogueMode::measure: record statistics only, write nothing
  int32_t splits;      // > 1: every split adds its exact partial sums into `workspace`
  int64_t k_chunk;     // K range of one split (a multiple of the kernel's stage depth)
  int32_t raw_stages;  // deep kernels: slots of the raw cp.async ring (2 … the smem limit)
  // Lean deep kernel: 1 sends every stage through the guarded copies. Nothing sets it any more (the
  // host leaves it 0); the field and the kernel's check stay because the kernels were measured with
  // them, and without them ptxas schedules the kernels differently.
  int32_t guarded_copies;
  int32_t tiles_m, tiles_n;
  int64_t batch_offset;  // batch entry of blockIdx.z == 0 (launches are chunked along batch)
  unsigned long long* workspace;  // int64 accumulators [batch][m][n], two's complement
  // Stream-K (the implicit-GEMM kernels; sk_ctas > 0, one CTA per multiprocessor, gridDim.x of
  // them; flexkit/portable/stream_k.hpp): tiles are numbered batch-major (tile = b · tiles_m ·
  // tiles_n + grouped index). CTA c runs the whole tiles c, c + gridDim.x, … below
  // sk_first_tile (a multiple of gridDim.x) and finishes them in place; then CTAs c < sk_ctas
  // share the stages of the tiles from sk_first_tile to sk_tiles evenly, part i of CTA c storing
  // its exact sums into the 128 × 128 int64 slot c · sk_parts + i of `workspace`, which
  // gemm_finish_stream_k_kernel adds up per tile in CTA order.
  int32_t sk_ctas, sk_parts;
  int64_t sk_first_tile, sk_tiles;
  portable::GemmStats* stats;
  // Where the kernel is its call's only one: the record's host copy and arrival counter, for the
  // last block to publish it (commit_block_stats); null where a publish kernel follows.
  portable::GemmStats* stats_host;
  uint32_t* stats_arrivals;
  ConvGather gather;  // the implicit-GEMM kernels only
};

// The output's offset of element (batch, row, col).
__device__ __forceinline__ int64_t output_offset(const IntegerGemmArgs& p, int64_t batch,
                                                 int64_t row, int64_t col) {
  return batch * p.c.batch_stride + row * p.c.row_stride + col * p.c.col_stride;
}

// The old output at `offset` as bits (a float's, or an int16 mantissa's), 0 where beta is 0 (the
// output is then never read). Separate from finish_given_old so that a thread can have the loads
// of several elements in flight before it uses them.
__device__ __forceinline__ uint32_t load_old_output(const IntegerGemmArgs& p, int64_t offset) {
  if (!p.epilogue.reads_old) return 0;
  if (p.out_is_f32) return __float_as_uint(static_cast<const float*>(p.c.data)[offset]);
  return uint16_t(static_cast<const int16_t*>(p.c.data)[offset]);
}

// The end of one output element whose old value (load_old_output) is at hand: the portable
// epilogue decides the value, this only writes and records statistics.
__device__ __forceinline__ void finish_given_old(const IntegerGemmArgs& p, int64_t offset,
                                                 int64_t acc, uint32_t old_bits,
                                                 portable::GemmStats& stats) {
  const portable::GemmEpilogue& e = p.epilogue;
  if (p.out_is_f32) {
    // The host rejects measure + f32 output + reads_old (gemm_stats_measure takes an int16 old).
    if (p.measure) {
      portable::gemm_stats_measure(stats, e, acc, 0);
      return;
    }
    static_cast<float*>(p.c.data)[offset] =
        portable::gemm_f32_result(e, acc, __uint_as_float(old_bits));
    return;
  }
  const int16_t old = static_cast<int16_t>(old_bits);
  if (p.measure) {
    portable::gemm_stats_measure(stats, e, acc, old);
    return;
  }
  const portable::Flex16Code code = portable::gemm_flex16_result(e, acc, old);
  static_cast<int16_t*>(p.c.data)[offset] = code.m;
  portable::gemm_stats_store(stats, code);
}

// The end of one output element: reads the old output (beta != 0), writes, and records
// statistics.
__device__ __forceinline__ void finish_element(const IntegerGemmArgs& p, int64_t batch, int64_t row,
                                               int64_t col, int64_t acc,
                                               portable::GemmStats& stats) {
  const int64_t offset = output_offset(p, batch, row, col);
  finish_given_old(p, offset, acc, load_old_output(p, offset), stats);
}

// Whether every output of the call takes the common epilogue (flex16 out, alpha 1, beta 0, a right
// shift the branch-free rounding covers, no measuring): the finishing passes' fast form.
__host__ __device__ __forceinline__ bool finishes_by_right_shift(const IntegerGemmArgs& p) {
  return !p.out_is_f32 && !p.measure && !p.epilogue.reads_old &&
         portable::gemm_rounds_by_right_shift(p.epilogue, p.k);
}

// Four consecutive outputs of one line through the common epilogue (flex16 out, alpha 1, beta
// 0, a right shift: the finishing passes' fast store; portable::gemm_rounds_by_right_shift),
// `valid` of them inside the tile: branch-free rounding, and one 8-byte store where all four are
// inside and the line runs along the output's unit stride. The statistics go into max_abs and
// saturated.
__device__ __forceinline__ void finish_four_shifted(const IntegerGemmArgs& p, int16_t* out,
                                                    int64_t along_stride, int64_t valid,
                                                    const int64_t (&total)[4], uint32_t& max_abs,
                                                    uint32_t& saturated) {
  portable::Flex16Code code[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    code[k] = portable::gemm_round_shift_right(total[k], p.epilogue.scale);
    if (k < valid) {
      const uint32_t a = static_cast<uint32_t>(code[k].m < 0 ? -int32_t(code[k].m) : code[k].m);
      max_abs = a > max_abs ? a : max_abs;
      saturated += code[k].saturated ? 1u : 0u;
    }
  }
  if (valid >= 4 && along_stride == 1 && (reinterpret_cast<uintptr_t>(out) & 7) == 0) {
    *reinterpret_cast<uint2*>(out) =
        make_uint2(uint32_t(uint16_t(code[0].m)) | (uint32_t(uint16_t(code[1].m)) << 16),
                   uint32_t(uint16_t(code[2].m)) | (uint32_t(uint16_t(code[3].m)) << 16));
    return;
  }
#pragma unroll
  for (int k = 0; k < 4; ++k)
    if (k < valid) out[k * along_stride] = code[k].m;
}

// Where a K split's exact total of output (batch, row, col) waits in the workspace: row-major
// ([batch][m][n]), or column-major ([batch][n][m]) where the output's rows are its unit stride,
// so that the finishing pass reads and writes consecutive elements with consecutive threads.
__device__ __forceinline__ int64_t split_index(const IntegerGemmArgs& p, int64_t batch, int64_t row,
                                               int64_t col) {
  return rows_are_unit_stride(p.c) ? (batch * p.n + col) * p.m + row
                                   : (batch * p.m + row) * p.n + col;
}

// Adds one exact partial accumulator of a K split into the workspace. Integer addition is
// associative, so the total is bit-identical whatever order the splits arrive in.
__device__ __forceinline__ void add_partial(const IntegerGemmArgs& p, int64_t batch, int64_t row,
                                            int64_t col, int64_t acc) {
  if (acc == 0) return;
  atomicAdd(p.workspace + split_index(p, batch, row, col), static_cast<unsigned long long>(acc));
}

}  // namespace flexkit::backend::cuda::gemm_kernels
