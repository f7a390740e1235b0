// The warp-specialised shallow implicit-GEMM kernels (gemm_shallow_specialized.cuh): fprop and
// bprop of flex16 activations for K of one stage and of two to four, with two consumers on
// 64 × 128 units (more than 64 rows) or three on 64 × 64 units (at most 64 rows).
#include <cstdint>
#include <string>

#include "backend/cuda/conv/conv_implicit_gemm_kernels.hpp"
#include "backend/cuda/gemm/gemm_shallow_specialized.cuh"
#include "backend/cuda/gemm/tensor_map_encoder.hpp"
#include "flexkit/error.hpp"

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
  // A one-row output's row stride is never stepped, but the map still wants a multiple of 16.
  const int64_t row_bytes = rows > 1 ? c.row_stride * 2 : (columns * 2 + 15) / 16 * 16;
  if (row_bytes <= 0 || row_bytes % 16 != 0) return false;
  const cuuint64_t dims[2] = {cuuint64_t(columns), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(row_bytes)};
  const cuuint32_t box[2] = {cuuint32_t(wgmma_detail::kStoreBoxColumns), 16};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult result = tensor_map_encoder()(
      &map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, c.data, dims, strides, box, element_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS)
    throw CudaError("cuTensorMapEncodeTiled failed (" + std::to_string(int(result)) + ") for a " +
                    std::to_string(rows) + " x " + std::to_string(columns) + " int16 output");
  return true;
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
void launch_direction(dim3 grid, const IntegerGemmArgs& args, cudaStream_t stream) {
  using namespace wgmma_detail;
  CUtensorMap map{};
  const bool one_stage = args.k == kWgmmaStageK;
  const int consumers = args.m > 64 ? 2 : 3;
  const bool mapped =
      specialized_bulk_stores(consumers, one_stage ? 1 : kDeep) && encode_output_map(args, map);
  if (args.m > 64) {
    if (one_stage) return launch_specialized_one<kAKContig, 1, 2>(grid, args, map, mapped, stream);
    return launch_specialized_one<kAKContig, kDeep, 2>(grid, args, map, mapped, stream);
  }
  if (one_stage) return launch_specialized_one<kAKContig, 1, 3>(grid, args, map, mapped, stream);
  launch_specialized_one<kAKContig, kDeep, 3>(grid, args, map, mapped, stream);
}
}  // namespace

bool prepare_shallow_specialized(ImplicitKernel kernel) {
  if (kernel == ImplicitKernel::fprop) return prepare_direction<false>();
  return kernel == ImplicitKernel::bprop && prepare_direction<true>();
}

void launch_shallow_specialized(ImplicitKernel kernel, dim3 grid, const IntegerGemmArgs& args,
                                cudaStream_t stream) {
  if (kernel == ImplicitKernel::fprop) return launch_direction<false>(grid, args, stream);
  launch_direction<true>(grid, args, stream);
}

}  // namespace flexkit::backend::cuda::gemm_kernels
