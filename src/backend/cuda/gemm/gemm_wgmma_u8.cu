// The wgmma kernel instantiated for a u8 B (spikes, masks): two byte products per K step.
#include "backend/cuda/gemm/gemm_wgmma.cuh"

namespace flexkit::backend::cuda::gemm_kernels {

bool prepare_wgmma_u8(bool a_k_contig, bool b_k_contig, bool wide) {
  return prepare_wgmma_variant<true>(a_k_contig, b_k_contig, wide);
}

void launch_wgmma_u8(bool a_k_contig, bool b_k_contig, bool wide, dim3 grid,
                     const IntegerGemmArgs& args, cudaStream_t stream) {
  launch_wgmma_variant<true>(a_k_contig, b_k_contig, wide, grid, args, stream);
}

int wgmma_max_raw_stages(bool b_is_u8, int tile_n) {
  return wgmma_detail::deep_max_raw_stages(b_is_u8, tile_n);
}

bool prepare_wgmma(const WgmmaVariant& variant) {
  return variant.b_is_u8 ? prepare_wgmma_u8(variant.a_k_contig, variant.b_k_contig,
                                            variant.tile_n == wgmma_detail::kWideTileN)
                         : prepare_wgmma_s16(variant.a_k_contig, variant.b_k_contig);
}

void launch_wgmma(const WgmmaVariant& variant, dim3 grid, const IntegerGemmArgs& args,
                  cudaStream_t stream) {
  if (variant.b_is_u8) {
    launch_wgmma_u8(variant.a_k_contig, variant.b_k_contig,
                    variant.tile_n == wgmma_detail::kWideTileN, grid, args, stream);
  } else {
    launch_wgmma_s16(variant.a_k_contig, variant.b_k_contig, grid, args, stream);
  }
}

}  // namespace flexkit::backend::cuda::gemm_kernels
