// The warp-specialised shallow implicit-GEMM kernels (gemm_shallow_specialized.cuh): fprop and
// bprop of flex16 activations for K of one stage and of two to four.
#include "backend/cuda/conv/conv_implicit_gemm_kernels.hpp"
#include "backend/cuda/gemm/gemm_shallow_specialized.cuh"

namespace flexkit::backend::cuda::gemm_kernels {

namespace {
constexpr int kDeep = wgmma_detail::kShallowMaxStages;
}  // namespace

bool prepare_shallow_specialized(ImplicitKernel kernel) {
  using namespace wgmma_detail;
  if (kernel == ImplicitKernel::fprop)
    return prepare_specialized_one<false, 1>() && prepare_specialized_one<false, kDeep>();
  return kernel == ImplicitKernel::bprop && prepare_specialized_one<true, 1>() &&
         prepare_specialized_one<true, kDeep>();
}

void launch_shallow_specialized(ImplicitKernel kernel, dim3 grid, const IntegerGemmArgs& args,
                                cudaStream_t stream) {
  using namespace wgmma_detail;
  const bool one_stage = args.k == kWgmmaStageK;
  if (kernel == ImplicitKernel::fprop) {
    if (one_stage) return launch_specialized_one<false, 1>(grid, args, stream);
    return launch_specialized_one<false, kDeep>(grid, args, stream);
  }
  if (one_stage) return launch_specialized_one<true, 1>(grid, args, stream);
  launch_specialized_one<true, kDeep>(grid, args, stream);
}

}  // namespace flexkit::backend::cuda::gemm_kernels
