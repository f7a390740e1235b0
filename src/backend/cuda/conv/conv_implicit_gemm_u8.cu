// The implicit-GEMM kernels for u8 spikes: fprop and update (bprop has no activation operand).
// Two byte products per K step.
#include "backend/cuda/conv/conv_implicit_gemm_kernels.hpp"
#include "backend/cuda/gemm/gemm_wgmma.cuh"

namespace flexkit::backend::cuda::gemm_kernels {

bool prepare_gather_u8(ImplicitKernel kernel) {
  using namespace wgmma_detail;
  if (kernel == ImplicitKernel::update)
    return prepare_one<true, true, true, kWgmmaTileN, kGatherUpdate>() &&
           prepare_one<true, true, true, kWgmmaTileN, kGatherUpdateStreamK>();
  return kernel == ImplicitKernel::fprop &&
         prepare_one<true, false, false, kWgmmaTileN, kGatherTaps>();
}

void launch_gather_u8(ImplicitKernel kernel, bool stream_k, dim3 grid, const IntegerGemmArgs& args,
                      cudaStream_t stream) {
  using namespace wgmma_detail;
  if (kernel == ImplicitKernel::update && stream_k) {
    launch_one<true, true, true, kWgmmaTileN, kGatherUpdateStreamK>(grid, args, stream);
  } else if (kernel == ImplicitKernel::update) {
    launch_one<true, true, true, kWgmmaTileN, kGatherUpdate>(grid, args, stream);
  } else {
    launch_one<true, false, false, kWgmmaTileN, kGatherTaps>(grid, args, stream);
  }
}

}  // namespace flexkit::backend::cuda::gemm_kernels
