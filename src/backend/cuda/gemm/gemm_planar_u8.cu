// The planar kernel instantiated for a u8 B (spikes, masks): two byte products per K step, in the
// square 128 × 128 tile or the wide 128 × 192 one.
#include "backend/cuda/gemm/gemm_planar.cuh"
#include "backend/cuda/gemm/gemm_planar.hpp"

namespace flexkit::backend::cuda::gemm_kernels {

bool prepare_planar_u8(int tile_n) {
  return tile_n == kWgmmaWideTileN ? planar_detail::prepare<true, kWgmmaWideTileN>()
                                   : planar_detail::prepare<true, kWgmmaTileN>();
}

void launch_planar_u8(int tile_n, dim3 grid, const IntegerGemmArgs& args, const PlanarMaps& maps,
                      cudaStream_t stream) {
  if (tile_n == kWgmmaWideTileN) {
    planar_detail::launch<true, kWgmmaWideTileN>(grid, args, maps, stream);
  } else {
    planar_detail::launch<true, kWgmmaTileN>(grid, args, maps, stream);
  }
}

}  // namespace flexkit::backend::cuda::gemm_kernels
