// The implicit-GEMM kernels for flex16 activations: fprop (filter m-contiguous), bprop (filter
// k-contiguous) and update (gradient k-contiguous, input gathered k-contiguous).
#include "backend/cuda/conv/conv_implicit_gemm_kernels.hpp"
#include "backend/cuda/gemm/gemm_wgmma.cuh"

namespace flexkit::backend::cuda::gemm_kernels {

bool prepare_gather_s16(ImplicitKernel kernel) {
  using namespace wgmma_detail;
  switch (kernel) {
    case ImplicitKernel::fprop:
      return prepare_one<false, false, false, kWgmmaTileN, kGatherTaps>();
    case ImplicitKernel::bprop:
      return prepare_one<false, true, false, kWgmmaTileN, kGatherTaps>();
    case ImplicitKernel::update:
      return prepare_one<false, true, true, kWgmmaTileN, kGatherUpdate>() &&
             prepare_one<false, true, true, kWgmmaTileN, kGatherUpdateStreamK>();
  }
  return false;
}

void launch_gather_s16(ImplicitKernel kernel, bool stream_k, dim3 grid, const IntegerGemmArgs& args,
                       cudaStream_t stream) {
  using namespace wgmma_detail;
  switch (kernel) {
    case ImplicitKernel::fprop:
      return launch_one<false, false, false, kWgmmaTileN, kGatherTaps>(grid, args, stream);
    case ImplicitKernel::bprop:
      return launch_one<false, true, false, kWgmmaTileN, kGatherTaps>(grid, args, stream);
    case ImplicitKernel::update:
      if (stream_k)
        return launch_one<false, true, true, kWgmmaTileN, kGatherUpdateStreamK>(grid, args, stream);
      return launch_one<false, true, true, kWgmmaTileN, kGatherUpdate>(grid, args, stream);
  }
}

}  // namespace flexkit::backend::cuda::gemm_kernels
