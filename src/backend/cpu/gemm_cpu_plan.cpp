// The CPU GEMM's kernel choice: the instruction sets as plan candidates, fastest first, what the
// hardware and FLEXKIT_GEMM_ISA allow, and the cache of dot()'s plans.
#include <algorithm>

#include "backend/cpu/gemm_cpu.hpp"
#include "core/environment.hpp"
#include "core/text.hpp"

namespace flexkit::backend::cpu {

namespace gemm_detail {

GemmIsa gemm_hardware_isa() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const GemmIsa isa = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512vnni"))
      return GemmIsa::avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return GemmIsa::avx2;
    return GemmIsa::scalar;
  }();
  return isa;
#else
  return GemmIsa::scalar;
#endif
}

GemmIsa gemm_isa_cap() {
  static const GemmIsa cap = detail::env_choice(
      "FLEXKIT_GEMM_ISA", GemmIsa::avx512,
      {{"scalar", GemmIsa::scalar}, {"avx2", GemmIsa::avx2}, {"avx512", GemmIsa::avx512}});
  return cap;
}

const char* isa_kernel_name(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::avx512:
      return "cpu.avx512_vnni";
    case GemmIsa::avx2:
      return "cpu.avx2";
    case GemmIsa::scalar:
      break;
  }
  return "cpu.scalar";
}

CanImplement can_implement_isa(GemmIsa isa, GemmIsa cap) {
  if (isa > cap) return cannot("above the FLEXKIT_GEMM_ISA cap");
  if (isa > gemm_hardware_isa())
    return cannot(isa == GemmIsa::avx512 ? "no AVX-512 VNNI on this CPU" : "no AVX2 and FMA");
  return kCanImplement;
}

GemmIsa choose_isa(GemmIsa cap, HeavyOpPlan& plan) {
  for (GemmIsa isa : {GemmIsa::avx512, GemmIsa::avx2}) {
    const CanImplement answer = can_implement_isa(isa, cap);
    if (answer.ok()) return isa;
    // The cap's own sets are skipped quietly: passing over what was asked against is noise.
    if (isa <= cap) plan.pass_over(isa_kernel_name(isa), answer);
  }
  return GemmIsa::scalar;  // runs everywhere
}

GemmIsa gemm_isa() {
  static const GemmIsa isa = [] {
    HeavyOpPlan unused;
    return choose_isa(gemm_isa_cap(), unused);
  }();
  return isa;
}

KernelSet kernels_for(GemmIsa isa) {
  switch (std::min(isa, gemm_hardware_isa())) {
    case GemmIsa::avx512:
      return avx512_kernels();
    case GemmIsa::avx2:
      return avx2_kernels();
    case GemmIsa::scalar:
      break;
  }
  return scalar_kernels();
}

}  // namespace gemm_detail

namespace {

// The problem class of a CPU product: the blocking depends on the extents and the kernel's
// tile only, never on the strides (every kernel packs from any strides).
struct GemmCpuKey {
  gemm::ElementKind a, b, c;
  std::int64_t batch, m, n, k;
  gemm_detail::GemmIsa cap;
  auto operator<=>(const GemmCpuKey&) const = default;
  std::string describe() const {
    return detail::cat("batch ", batch, " m ", m, " n ", n, " k ", k, ", A ",
                       gemm::element_kind_name(a), " B ", gemm::element_kind_name(b), " out ",
                       gemm::element_kind_name(c));
  }
};

}  // namespace

const GemmCpuPlan& gemm_cpu_plan(const gemm::GemmProblem& p) {
  static PlanCache<GemmCpuKey, GemmCpuPlan> cache("dot");
  const GemmCpuKey key{p.a.kind, p.b.kind, p.c.kind, p.batch,
                       p.m,      p.n,      p.k,      gemm_detail::gemm_isa_cap()};
  return cache.get(key, [&] { return make_gemm_cpu_plan(p, key.cap); });
}

}  // namespace flexkit::backend::cpu
