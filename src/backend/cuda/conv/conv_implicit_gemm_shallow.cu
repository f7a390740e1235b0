// The shallow implicit-GEMM kernels (gemm_shallow.cuh): fprop and bprop of flex16 activations
// and fprop of u8 spikes, for convolutions whose K is at most four 64-deep stages. The int16
// ones come twice: for K of one stage (a deeper B ring) and of two to four.
#include "backend/cuda/conv/conv_implicit_gemm_kernels.hpp"
#include "backend/cuda/gemm/gemm_shallow.cuh"

namespace flexkit::backend::cuda::gemm_kernels {

namespace {
constexpr int kDeep = wgmma_detail::kShallowMaxStages;
}  // namespace

bool prepare_shallow(ImplicitKernel kernel, bool b_is_u8) {
  using namespace wgmma_detail;
  if (b_is_u8) return kernel == ImplicitKernel::fprop && prepare_shallow_one<true, false, kDeep>();
  if (kernel == ImplicitKernel::fprop)
    return prepare_shallow_one<false, false, 1>() && prepare_shallow_one<false, false, kDeep>();
  return kernel == ImplicitKernel::bprop && prepare_shallow_one<false, true, 1>() &&
         prepare_shallow_one<false, true, kDeep>();
}

void launch_shallow(ImplicitKernel kernel, bool b_is_u8, dim3 grid, const IntegerGemmArgs& args,
                    cudaStream_t stream) {
  using namespace wgmma_detail;
  const bool one_stage = args.k == kWgmmaStageK;
  if (b_is_u8) return launch_shallow_one<true, false, kDeep>(grid, args, stream);
  if (kernel == ImplicitKernel::fprop) {
    if (one_stage) return launch_shallow_one<false, false, 1>(grid, args, stream);
    return launch_shallow_one<false, false, kDeep>(grid, args, stream);
  }
  if (one_stage) return launch_shallow_one<false, true, 1>(grid, args, stream);
  launch_shallow_one<false, true, kDeep>(grid, args, stream);
}

int shallow_max_stages() {
  return wgmma_detail::kShallowMaxStages;
}

}  // namespace flexkit::backend::cuda::gemm_kernels
