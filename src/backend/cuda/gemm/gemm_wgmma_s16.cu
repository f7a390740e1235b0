// The wgmma kernel instantiated for an int16 (flex16) B: four byte products per K step.
#include "backend/cuda/gemm/gemm_wgmma.cuh"

namespace flexkit::backend::cuda::gemm_kernels {

bool prepare_wgmma_s16(bool a_k_contig, bool b_k_contig) {
  return prepare_wgmma_variant<false>(a_k_contig, b_k_contig, false);
}

void launch_wgmma_s16(bool a_k_contig, bool b_k_contig, dim3 grid, const IntegerGemmArgs& args,
                      cudaStream_t stream) {
  launch_wgmma_variant<false>(a_k_contig, b_k_contig, false, grid, args, stream);
}

}  // namespace flexkit::backend::cuda::gemm_kernels
