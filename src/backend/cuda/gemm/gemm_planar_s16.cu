// The planar kernel instantiated for an int16 (flex16) B: four byte products per K step.
#include "backend/cuda/gemm/gemm_planar.cuh"
#include "backend/cuda/gemm/gemm_planar.hpp"

namespace flexkit::backend::cuda::gemm_kernels {

bool prepare_planar_s16() {
  return planar_detail::prepare<false, kWgmmaTileN>();
}

void launch_planar_s16(dim3 grid, const IntegerGemmArgs& args, const PlanarMaps& maps,
                       cudaStream_t stream) {
  planar_detail::launch<false, kWgmmaTileN>(grid, args, maps, stream);
}

}  // namespace flexkit::backend::cuda::gemm_kernels
