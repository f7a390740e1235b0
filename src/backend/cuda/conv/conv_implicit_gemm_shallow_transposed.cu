// The transposed shallow kernel (gemm_shallow_transposed.cuh): 1×1 fprop and bprop of flex16
// activations with at most 64 output rows over at most four stages, or at most 256 over one,
// where the activations are a plain matrix.
#include <algorithm>
#include <cstdint>

#include "backend/cuda/conv/conv_implicit_gemm_kernels.hpp"
#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/gemm/gemm_shallow_transposed.cuh"
#include "backend/cuda/gemm/tensor_map_encoder.hpp"

namespace flexkit::backend::cuda::gemm_kernels {

namespace {

// B (`channels` k-rows of n positions, channel_stride apart) as the kernel's 5-D map: channel
// k = b + 4·a + 2·h + 16·j at (position, b, a, h, j), boxes of 64 positions × 2 × 4 × 2 × 4,
// 128-byte swizzle, zeros past the positions and the channels. False where it does not fit
// (channels not a multiple of 16, a row stride or base not a multiple of 16 bytes) or the driver
// declines it.
bool encode_b_map(const IntegerGemmArgs& args, CUtensorMap& map) {
  const int64_t channels = args.gather.channels, ld = args.gather.channel_stride;
  if (channels % 16 != 0 || ld % 8 != 0 || ld <= 0 ||
      reinterpret_cast<uintptr_t>(args.b.data) % 16 != 0 || args.n > INT32_MAX)
    return false;
  const cuuint64_t dims[5] = {cuuint64_t(args.n), 2, 4, 2, cuuint64_t(channels / 16)};
  const cuuint64_t strides[4] = {cuuint64_t(ld * 2), cuuint64_t(4 * ld * 2), cuuint64_t(2 * ld * 2),
                                 cuuint64_t(16 * ld * 2)};
  const cuuint32_t box[5] = {64, 2, 4, 2, 4};
  const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  return tensor_map_encoder()(
             &map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 5, const_cast<void*>(args.b.data), dims, strides,
             box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// C (m ≤ 64 rows of n int16 columns) as the consumers' store map: boxes of 64 columns × 64 rows,
// 128-byte swizzle. False where the map cannot describe it (columns not the unit stride, a row
// stride or base not a multiple of 16 bytes) or the driver declines it.
bool encode_c_map(const IntegerGemmArgs& args, CUtensorMap& map) {
  const OutputView& c = args.c;
  if ((c.col_stride != 1 && args.n > 1) || reinterpret_cast<uintptr_t>(c.data) % 16 != 0 ||
      args.n > INT32_MAX)
    return false;
  if (args.m > 1 && (c.row_stride <= 0 || c.row_stride % 8 != 0)) return false;
  const int64_t row_bytes = args.m > 1 ? c.row_stride * 2 : (args.n * 2 + 15) / 16 * 16;
  const cuuint64_t dims[2] = {cuuint64_t(args.n), cuuint64_t(args.m)};
  const cuuint64_t strides[1] = {cuuint64_t(row_bytes)};
  const cuuint32_t box[2] = {wgmma_detail::kTransposedTileN, 64};
  const cuuint32_t element_strides[2] = {1, 1};
  return tensor_map_encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, c.data, dims, strides, box,
                              element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                              CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The problem's extents, then its two tensor maps (which the launch encodes again for its own
// pointers: the driver's answer depends on their alignment only).
backend::CanImplement fits(const IntegerGemmArgs& args, CUtensorMap& b_map, CUtensorMap& c_map) {
  using namespace wgmma_detail;
  const bool wide = args.m > 64;
  if (wide ? args.m > 256 || args.k > kWgmmaStageK
           : args.k > int64_t(kShallowMaxStages) * kWgmmaStageK)
    return backend::cannot("more than 64 rows past one stage, or more than 256");
  if (!encode_b_map(args, b_map)) return backend::cannot("activations its tensor map cannot take");
  if (!encode_c_map(args, c_map)) return backend::cannot("an output its tensor map cannot take");
  return backend::kCanImplement;
}

template <bool kAKContig>
bool launch_direction(const IntegerGemmArgs& args, int sms, cudaStream_t stream) {
  using namespace wgmma_detail;
  const bool wide = args.m > 64;
  CUtensorMap b_map{}, c_map{};
  if (!fits(args, b_map, c_map).ok()) return false;
  const int64_t tiles = (args.n + kTransposedTileN - 1) / kTransposedTileN;
  const int64_t ctas = std::max<int64_t>(
      1, std::min<int64_t>(sms, (tiles + kTransposedConsumers - 1) / kTransposedConsumers));
  launch_dependent(true,
                   wide ? gemm_shallow_transposed_kernel<kAKContig, true>
                        : gemm_shallow_transposed_kernel<kAKContig, false>,
                   dim3(static_cast<unsigned>(ctas)), dim3(kTransposedThreads),
                   transposed_smem_bytes(), stream, args, b_map, c_map);
  return true;
}

}  // namespace

bool prepare_shallow_transposed(ImplicitKernel kernel) {
  using namespace wgmma_detail;
  if (kernel == ImplicitKernel::fprop)
    return prepare_sm90_kernel(gemm_shallow_transposed_kernel<false, false>,
                               transposed_smem_bytes()) &&
           prepare_sm90_kernel(gemm_shallow_transposed_kernel<false, true>,
                               transposed_smem_bytes());
  return kernel == ImplicitKernel::bprop &&
         prepare_sm90_kernel(gemm_shallow_transposed_kernel<true, false>,
                             transposed_smem_bytes()) &&
         prepare_sm90_kernel(gemm_shallow_transposed_kernel<true, true>, transposed_smem_bytes());
}

backend::CanImplement can_implement_shallow_transposed(ImplicitKernel kernel,
                                                       const IntegerGemmArgs& args) {
  if (kernel == ImplicitKernel::update) return backend::cannot("an update");
  CUtensorMap b_map{}, c_map{};
  return fits(args, b_map, c_map);
}

bool launch_shallow_transposed(ImplicitKernel kernel, const IntegerGemmArgs& args, int sms,
                               cudaStream_t stream) {
  if (kernel == ImplicitKernel::fprop) return launch_direction<false>(args, sms, stream);
  return kernel == ImplicitKernel::bprop && launch_direction<true>(args, sms, stream);
}

}  // namespace flexkit::backend::cuda::gemm_kernels
