// The warp-specialised shallow implicit-GEMM kernels (gemm_shallow_specialized.cuh): fprop and
// bprop of flex16 activations for K of one stage and of two to four, with two consumers on
// 64 × 128 units (more than 64 rows) or three on 64 × 64 units (at most 64 rows).
#include <cstdint>

#include "backend/cuda/conv/conv_implicit_gemm_kernels.hpp"
#include "backend/cuda/gemm/gemm_shallow_specialized.cuh"
#include "backend/cuda/gemm/tensor_map_encoder.hpp"

namespace flexkit::backend::cuda::gemm_kernels {

namespace {
constexpr int kDeep = wgmma_detail::kShallowMaxStages;

// The m × n int16 output as the consumers' store map: boxes of 64 columns × 16 rows, 128-byte
// swizzle. False where the map cannot describe it (columns not the unit stride, a row stride or
// base not a multiple of 16 bytes, coordinates past int32); the kernel then stores from the
// registers.
bool encode_output_map(const IntegerGemmArgs& args, CUtensorMap& map) {
  const OutputView& c = args.c;
  const int64_t rows = args.m, columns = args.n;
  if (c.col_stride != 1 && columns > 1) return false;
  if (reinterpret_cast<uintptr_t>(c.data) % 16 != 0 || rows > INT32_MAX || columns > INT32_MAX)
    return false;
  if (rows > 1 && (c.row_stride <= 0 || c.row_stride % 8 != 0)) return false;
  map = encode_int16_rows(c.data, rows, columns, c.row_stride, wgmma_detail::kStoreBoxColumns, 16,
                          "output");
  return true;
}

// B (the gathered operand) as BoxS16Split's 4-D map, where the caller found it a plain matrix of
// `channels` rows one channel_stride apart and n columns: k-row k = 16·q + 2·h + b at
// (column, b, q, h), boxes of 64 columns × 2 × 4 × 8, 128-byte swizzle, zeros past the columns
// and past the channels. False where the map does not fit (channels not a multiple of 16, a row
// stride not a multiple of 16 bytes) or the driver declines it; the producer then gathers.
bool encode_b_map(const IntegerGemmArgs& args, CUtensorMap& map) {
  const int64_t channels = args.gather.channels, ld = args.gather.channel_stride;
  if (channels % 16 != 0 || ld % 8 != 0 || ld <= 0 ||
      reinterpret_cast<uintptr_t>(args.b.data) % 16 != 0 || args.n > INT32_MAX)
    return false;
  const cuuint64_t dims[4] = {cuuint64_t(args.n), 2, cuuint64_t(channels / 16), 8};
  const cuuint64_t strides[3] = {cuuint64_t(ld * 2), cuuint64_t(16 * ld * 2),
                                 cuuint64_t(2 * ld * 2)};
  const cuuint32_t box[4] = {64, 2, 4, 8};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  return tensor_map_encoder()(
             &map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 4, const_cast<void*>(args.b.data), dims, strides,
             box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <bool kAKContig>
bool prepare_direction() {
  using namespace wgmma_detail;
  return prepare_specialized_one<kAKContig, 1, 2>() &&
         prepare_specialized_one<kAKContig, kDeep, 2>() &&
         prepare_specialized_one<kAKContig, 1, 3>() &&
         prepare_specialized_one<kAKContig, kDeep, 3>();
}

// Measured on the H200 (1x1 56x56 layers, ms): with at most 64 rows, three consumers on 64 × 64
// units with streaming stores against two on whole 128-column tiles taken in turns, C256 K64
// fprop and C64 K256 bprop 0.056 → 0.051; with more rows, three consumers on 64 × 64 units lose
// to two on 64 × 128 (C64 K256 fprop and C256 K64 bprop, 0.056 → 0.061: the wgmmas read A's
// planes twice as often).
template <bool kAKContig>
bool launch_direction(dim3 grid, const IntegerGemmArgs& args, bool b_plain, cudaStream_t stream) {
  using namespace wgmma_detail;
  CUtensorMap map{}, b_map{};
  const bool one_stage = args.k == kWgmmaStageK;
  const int consumers = args.m > 64 ? 2 : 3;
  const bool mapped =
      specialized_bulk_stores(consumers, one_stage ? 1 : kDeep) && encode_output_map(args, map);
  const bool b_mapped = b_plain && encode_b_map(args, b_map);
  if (args.m > 64) {
    if (one_stage) {
      launch_specialized_one<kAKContig, 1, 2>(grid, args, map, mapped, b_map, b_mapped, stream);
    } else {
      launch_specialized_one<kAKContig, kDeep, 2>(grid, args, map, mapped, b_map, b_mapped, stream);
    }
  } else if (one_stage) {
    launch_specialized_one<kAKContig, 1, 3>(grid, args, map, mapped, b_map, b_mapped, stream);
  } else {
    launch_specialized_one<kAKContig, kDeep, 3>(grid, args, map, mapped, b_map, b_mapped, stream);
  }
  return b_mapped;
}
}  // namespace

bool prepare_shallow_specialized(ImplicitKernel kernel) {
  if (kernel == ImplicitKernel::fprop) return prepare_direction<false>();
  return kernel == ImplicitKernel::bprop && prepare_direction<true>();
}

bool launch_shallow_specialized(ImplicitKernel kernel, dim3 grid, const IntegerGemmArgs& args,
                                bool b_plain, cudaStream_t stream) {
  if (kernel == ImplicitKernel::fprop) return launch_direction<false>(grid, args, b_plain, stream);
  return launch_direction<true>(grid, args, b_plain, stream);
}

}  // namespace flexkit::backend::cuda::gemm_kernels
