// The warp-specialised shallow implicit-GEMM kernels (gemm_shallow_specialized.cuh): fprop and
// bprop of flex16 activations for K of one stage and of two to four, with two consumers on
// 64 × 128 units (more than 64 rows) or three on 64 × 64 units (at most 64 rows).
#include "backend/cuda/conv/conv_implicit_gemm_kernels.hpp"
#include "backend/cuda/gemm/gemm_shallow_specialized.cuh"

namespace flexkit::backend::cuda::gemm_kernels {

namespace {
constexpr int kDeep = wgmma_detail::kShallowMaxStages;

template <bool kAKContig>
bool prepare_direction() {
  using namespace wgmma_detail;
  return prepare_specialized_one<kAKContig, 1, 2>() &&
         prepare_specialized_one<kAKContig, kDeep, 2>() &&
         prepare_specialized_one<kAKContig, 1, 3>() &&
         prepare_specialized_one<kAKContig, kDeep, 3>();
}

// Measured on the H200 (1x1 56x56 layers, ms): with at most 64 rows, three consumers on 64 × 64
// units with streaming stores against two on whole 128-column tiles taken in turns, C256 K64
// fprop and C64 K256 bprop 0.056 → 0.051; with more rows, three consumers on 64 × 64 units lose
// to two on 64 × 128 (C64 K256 fprop and C256 K64 bprop, 0.056 → 0.061: the wgmmas read A's
// planes twice as often).
template <bool kAKContig>
void launch_direction(dim3 grid, const IntegerGemmArgs& args, cudaStream_t stream) {
  using namespace wgmma_detail;
  const bool one_stage = args.k == kWgmmaStageK;
  if (args.m > 64) {
    if (one_stage) return launch_specialized_one<kAKContig, 1, 2>(grid, args, stream);
    return launch_specialized_one<kAKContig, kDeep, 2>(grid, args, stream);
  }
  if (one_stage) return launch_specialized_one<kAKContig, 1, 3>(grid, args, stream);
  launch_specialized_one<kAKContig, kDeep, 3>(grid, args, stream);
}
}  // namespace

bool prepare_shallow_specialized(ImplicitKernel kernel) {
  if (kernel == ImplicitKernel::fprop) return prepare_direction<false>();
  return kernel == ImplicitKernel::bprop && prepare_direction<true>();
}

void launch_shallow_specialized(ImplicitKernel kernel, dim3 grid, const IntegerGemmArgs& args,
                                cudaStream_t stream) {
  if (kernel == ImplicitKernel::fprop) return launch_direction<false>(grid, args, stream);
  launch_direction<true>(grid, args, stream);
}

}  // namespace flexkit::backend::cuda::gemm_kernels
