// The plans of the exact integer GEMM on CUDA (gemm_integer_cuda), as every heavy operation plans
// (backend/heavy_op_plan.hpp): which kernel runs a shape class, its tiles and K split, made once
// per class and kept. The kernels and the launches are in gemm_integer.cu; the candidates' checks
// and the choice are in gemm_plan.cu.
//
// Candidates, in the order they are tried: "cuda.planar" (sm_90a, the default for large products:
// the operands split once into byte planes in global memory, any strides, then streamed by TMA
// into wgmma, gemm_planar.cuh), "cuda.ss" (sm_90a: both operands split inside the kernel, any
// unit-stride layout, raw tiles streamed by a deep cp.async ring, gemm_wgmma_lean_kernel),
// "cuda.simple" (any arch, any strides). FLEXKIT_GEMM_KERNEL=simple|planar|ss forces one where it
// applies (a forced kernel that does not apply falls back to the next that does; FLEXKIT_LOG=1
// says which, and why). A u8 B gets a 128 × 192 tile in "planar" and "ss" (the fastest u8
// variant measured).
#pragma once
#include <compare>
#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/cuda/gemm/gemm_kernel_args.cuh"
#include "backend/cuda/gemm/gemm_wgmma.hpp"
#include "backend/gemm_problem.hpp"
#include "backend/heavy_op_plan.hpp"

namespace flexkit::backend::cuda::gemm_kernels {

// The simple kernel's output tile and the split-K finishing pass's block size.
inline constexpr int kSimpleTile = 64;
inline constexpr int kFinishThreads = 256;

enum class KernelKind : uint8_t { simple, planar, ss };
// What FLEXKIT_GEMM_KERNEL asks for.
enum class KernelChoice : uint8_t { automatic, simple, planar, ss };

// The GEMM's settings, read from the environment once per process.
struct GemmSettings {
  KernelChoice forced = KernelChoice::automatic;  // FLEXKIT_GEMM_KERNEL
};
const GemmSettings& gemm_settings();

struct PlanKey {
  int device;
  bool b_is_u8, out_is_f32, measure;
  KernelChoice forced;
  bool layout_fast;  // both operands have a unit stride and 16-byte aligned rows
  bool a_k_contig, b_k_contig;
  int64_t batch, m, n, k;
  auto operator<=>(const PlanKey&) const = default;
  std::string describe() const;  // for the FLEXKIT_LOG line
};

struct Plan : HeavyOpPlan {
  KernelKind kind = KernelKind::simple;
  WgmmaVariant variant{};
  int64_t tiles_m = 0, tiles_n = 0;
  int32_t splits = 1;
  int64_t k_chunk = 0;
  int32_t raw_stages = 0;  // the deep kernel's raw ring
  unsigned finish_blocks = 0;
};

inline int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// The layout class of one operand for the wgmma kernel: which stride is unit, and whether its
// rows (the other stride), batch stride and base pointer keep 16-byte vector loads aligned.
// Strides along an axis of extent 1 never move the address, so they do not count.
struct OperandLayout {
  bool fast = false;
  bool k_contig = false;
};

OperandLayout classify(const OperandView& v, int64_t rows, int64_t k, int64_t batch,
                       int64_t element_bytes);

// Strides along axes of extent 1 set to 0, the unit stride of such an axis to 1: the addresses the
// kernels form are unchanged, and the wgmma kernel's stage step along K stays meaningful.
OperandView normalised(OperandView v, int64_t rows, int64_t k, int64_t batch);

// The problem class of `problem` on `device` under the current settings.
PlanKey plan_key(const gemm::GemmProblem& problem, int device);

// The plan of `key`'s shape class, made (and logged under FLEXKIT_LOG=1) on its first call;
// called with the device current (the caller holds a DeviceGuard).
const Plan& plan_for(const PlanKey& key);

}  // namespace flexkit::backend::cuda::gemm_kernels
