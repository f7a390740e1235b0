// The CPU GEMM kernels: exact integer products (flex16 × flex16, flex16 × u8) and f32, planned as
// every heavy operation is (backend/heavy_op_plan.hpp): the kernel set of the fastest
// instruction set that applies, and the cut of the output into work units.
#pragma once
#include <cstdint>

#include "backend/cpu/gemm/gemm_kernels.hpp"
#include "backend/gemm_problem.hpp"
#include "backend/heavy_op_plan.hpp"

namespace flexkit::backend::cpu {

// How the output is cut into work units: batch × column strips × row parts.
struct GemmBlocking {
  std::int64_t nc = 0;  // strip width, a multiple of the kernel's NR
  std::int64_t n_strips = 0;
  std::int64_t m_parts = 0;
  std::int64_t units() const { return n_strips * m_parts; }
};

struct GemmCpuPlan : HeavyOpPlan {
  gemm_detail::GemmIsa isa = gemm_detail::GemmIsa::scalar;
  GemmBlocking blocking;
};

// The plan of `problem` with the fastest kernel set `cap` allows, made now (not cached).
GemmCpuPlan make_gemm_cpu_plan(const gemm::GemmProblem& problem, gemm_detail::GemmIsa cap);
// dot()'s plan under FLEXKIT_GEMM_ISA: cached per element kinds and extents (strides do not
// change the choice), logged under FLEXKIT_LOG=1 when made.
const GemmCpuPlan& gemm_cpu_plan(const gemm::GemmProblem& problem);
// Runs `problem` on the CPU thread pool as `plan` says (a plan of this problem's class).
// Integer products finish through the portable epilogue and return the merged statistics
// (gemm_stats_identity() when nothing was recorded); f32 products return the identity.
portable::GemmStats run_gemm_cpu(const GemmCpuPlan& plan, const gemm::GemmProblem& problem);

}  // namespace flexkit::backend::cpu

namespace flexkit::gemm {

// make_gemm_cpu_plan under FLEXKIT_GEMM_ISA, then run: for GEMMs inside other operations (the
// CPU convolutions' lowered blocks), which plan for themselves.
portable::GemmStats gemm_cpu(const GemmProblem& problem);

}  // namespace flexkit::gemm
