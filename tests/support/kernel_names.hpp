// What the tests expect the planners to choose, written from the documented rules
// (docs/kernels.md) and the forcing variables, independently of the planners' code.
#pragma once
#include <algorithm>
#include <cstdlib>
#include <string>

#include "backend/cpu/gemm/gemm_kernels.hpp"

namespace flexkit::test {

// A variable's value, "" when unset.
inline std::string env_or_empty(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

// The CPU kernel set every heavy product takes: the best instruction set the hardware runs,
// capped by FLEXKIT_GEMM_ISA.
inline std::string cpu_kernel_name(backend::cpu::gemm_detail::GemmIsa isa) {
  using backend::cpu::gemm_detail::GemmIsa;
  return isa == GemmIsa::avx512 ? "cpu.avx512_vnni"
         : isa == GemmIsa::avx2 ? "cpu.avx2"
                                : "cpu.scalar";
}

inline std::string expected_cpu_kernel_name() {
  using backend::cpu::gemm_detail::GemmIsa;
  const std::string cap = env_or_empty("FLEXKIT_GEMM_ISA");
  const GemmIsa capped = cap == "scalar" ? GemmIsa::scalar
                         : cap == "avx2" ? GemmIsa::avx2
                                         : GemmIsa::avx512;
  return cpu_kernel_name(std::min(capped, backend::cpu::gemm_detail::gemm_hardware_isa()));
}

}  // namespace flexkit::test
