// What the CUDA convolution's planner (conv_cuda_plan.cu) and its tensor-core launches
// (conv_implicit_gemm.cu) share: the settings, the implicit GEMM a direction describes, and the
// checks of the kernels' images and of the shallow kernels' conditions.
#pragma once
#include <cstdint>
#include <optional>

#include "backend/conv_problem.hpp"
#include "backend/cuda/conv/conv_implicit_gemm.hpp"
#include "backend/cuda/conv/conv_implicit_gemm_kernels.hpp"
#include "backend/cuda/gemm/gemm_kernel_args.cuh"
#include "backend/heavy_op_plan.hpp"

namespace flexkit::conv::implicit {

namespace gk = backend::cuda::gemm_kernels;
using backend::CanImplement;

// FLEXKIT_CONV_KERNEL: unset or empty, each problem's own choice; otherwise a kernel forced for
// comparisons and tests. Any other value is an error, so that a misspelt one cannot silently
// measure the default.
enum class KernelChoice : std::uint8_t { automatic, direct, lean, lockstep, specialized };

// The convolution's settings, read from the environment once per process.
struct ConvSettings {
  KernelChoice kernel = KernelChoice::automatic;  // FLEXKIT_CONV_KERNEL
  // FLEXKIT_CONV_STREAM_K: the CTAs of a stream-K launch; unset, one per multiprocessor; 0, none
  // (stream-K off); a positive count, that many (to test whole rounds on small layers).
  std::optional<std::int64_t> stream_k_ctas;
};
const ConvSettings& conv_settings();

// One direction as an implicit GEMM: its arguments (pointers of the problem it was described
// from) and what the kernels' choice needs to know of its layout.
struct Setup {
  gk::IntegerGemmArgs args{};
  // update of a 1×1 filter whose B (the input) needs no gather: B as a plain matrix.
  bool b_is_plain = false;
  gk::OperandView plain_b{};
  // fprop or bprop of a 1×1 filter at stride 1 without padding, the gathered operand's positions
  // and n one unit stride: its channels are the rows of a plain matrix (channel_stride apart).
  bool gathered_is_plain = false;
  gk::ImplicitKernel kernel = gk::ImplicitKernel::fprop;
  std::int64_t taps = 1;  // grid z: update runs one GEMM per tap
};

// The implicit GEMM of `problem` in `direction` into `setup`, or why its layout does not fit.
CanImplement describe(ImplicitDirection direction, const ConvProblem& problem, Setup& setup);

// Whether the device runs the kernels (each one's shared-memory limit raised once per device):
// the lean kernels of the setup's direction, or (`shallow`) the persistent shallow ones; the
// deep-K kernel.
bool prepared(int device, bool b_is_u8, gk::ImplicitKernel kernel, bool shallow = false);
bool deep_k_prepared(int device);

// Whether the shallow persistent kernels take a described fprop or bprop: K of at most four
// 64-deep stages (1×1 layers with up to 256 reduced channels), a flex16 output written with the
// pure integer epilogue (no f32 output, no measuring pass, no beta), the shift its 32-bit
// rounding covers, and column pairs it can store as one word.
CanImplement shallow_fits(const Setup& setup);

}  // namespace flexkit::conv::implicit
