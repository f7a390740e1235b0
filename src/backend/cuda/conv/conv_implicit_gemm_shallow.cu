// The shallow implicit-GEMM kernels (gemm_shallow.cuh): fprop and bprop of flex16 activations
// and fprop of u8 spikes, for convolutions whose K is at most four 64-deep stages.
#include "backend/cuda/conv/conv_implicit_gemm_kernels.hpp"
#include "backend/cuda/gemm/gemm_shallow.cuh"

namespace flexkit::backend::cuda::gemm_kernels {

bool prepare_shallow(ImplicitKernel kernel, bool b_is_u8) {
  using namespace wgmma_detail;
  if (b_is_u8) return kernel == ImplicitKernel::fprop && prepare_shallow_one<true, false>();
  if (kernel == ImplicitKernel::fprop) return prepare_shallow_one<false, false>();
  return kernel == ImplicitKernel::bprop && prepare_shallow_one<false, true>();
}

void launch_shallow(ImplicitKernel kernel, bool b_is_u8, dim3 grid, const IntegerGemmArgs& args,
                    cudaStream_t stream) {
  using namespace wgmma_detail;
  if (b_is_u8) return launch_shallow_one<true, false>(grid, args, stream);
  if (kernel == ImplicitKernel::fprop) return launch_shallow_one<false, false>(grid, args, stream);
  launch_shallow_one<false, true>(grid, args, stream);
}

int shallow_max_stages() {
  return wgmma_detail::kShallowMaxStages;
}

}  // namespace flexkit::backend::cuda::gemm_kernels
