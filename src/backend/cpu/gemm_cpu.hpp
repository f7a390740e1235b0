// The CPU GEMM kernels: exact integer products (flex16 × flex16, flex16 × u8) and f32.
#pragma once
#include "backend/gemm_problem.hpp"

namespace flexkit::gemm {

// Runs `problem` on the CPU thread pool. Integer products finish through the portable epilogue
// and return the merged statistics (gemm_stats_identity() when nothing was recorded); f32
// products return the identity.
portable::GemmStats gemm_cpu(const GemmProblem& problem);

}  // namespace flexkit::gemm
