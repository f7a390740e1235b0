// Which kernel dot() plans (docs/kernels.md), asked through dot_kernel_name without running
// anything: the documented choice under the run's FLEXKIT_GEMM_KERNEL (CTest runs the test_gemm
// binary under each forced kernel) or FLEXKIT_GEMM_ISA, the fall-backs where a forced kernel does
// not apply, and the plan a name asks for being the one the call then runs.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "flexkit/cuda.hpp"
#include "flexkit/error.hpp"
#include "flexkit/gemm.hpp"
#include "support/kernel_names.hpp"
#include "support/test_device.hpp"

namespace flexkit {
namespace {

// The kernel the plan names for a call, checked without running it, against the documented
// choice (docs/kernels.md) under the forcing variable of the run: CTest runs this binary with
// FLEXKIT_GEMM_KERNEL=simple, planar and ss as well, so each forced kernel is seen planned where
// it applies and seen falling back where it does not.
TEST(Dot, PlannedKernelFollowsTheSetting) {
  const Device d = test::device();
  auto flex = [&](const Shape& shape) { return Array::zeros(shape, DType::flex16, d); };
  // Unit strides and 16-byte rows, small: below the planar kernel's break-even.
  const Array a = flex({64, 96}), b = flex({96, 128}), out = flex({64, 128});
  const Array b_u8 = Array::zeros({96, 128}, DType::u8, d);
  // m·n ≥ 1024·(m + n): where splitting into planes pays.
  const Array wa = flex({3072, 64}), wb = flex({64, 3072}), wout = flex({3072, 3072});
  // No unit stride: only the planar and simple kernels read it.
  const Array sa = flex({128, 192}).index("::2, ::2");
  const Array fa = Array::zeros({64, 96}, DType::f32, d),
              fb = Array::zeros({96, 128}, DType::f32, d);
  const Array fout = Array::zeros({64, 128}, DType::f32, d);
  const DotOptions options{.iwl = 4};
  struct Case {
    const char* what;
    std::string got;
  };
  const std::vector<Case> cases = {
      {"small", dot_kernel_name(a, b, out, options)},
      {"small u8", dot_kernel_name(a, b_u8, out, options)},
      {"spikes first", dot_kernel_name(b_u8.T(), a.T(), out.T(), options)},
      {"wide", dot_kernel_name(wa, wb, wout, options)},
      {"strided", dot_kernel_name(sa, b, out, options)},
      {"f32", dot_kernel_name(fa, fb, fout)}};
  if (d.is_cpu()) {
    for (const Case& c : cases) EXPECT_EQ(c.got, test::expected_cpu_kernel_name()) << c.what;
    return;
  }
  const cuda::DeviceInfo info = cuda::device_info(d.index);
  const bool sm90 = info.compute_major == 9 && info.compute_minor == 0;
  const std::string forced = test::env_or_empty("FLEXKIT_GEMM_KERNEL");
  // Per layout: the automatic choice, and the kernel under FLEXKIT_GEMM_KERNEL=planar and =ss
  // (ss takes no operand without a unit stride, which then falls back to simple).
  struct Want {
    const char *automatic, *planar, *ss;
  };
  const Want fast_small{"cuda.ss", "cuda.planar", "cuda.ss"};
  const Want fast_wide{"cuda.planar", "cuda.planar", "cuda.ss"};
  const Want strided{"cuda.planar", "cuda.planar", "cuda.simple"};
  auto want = [&](const Want& w) -> std::string {
    if (!sm90 || forced == "simple") return "cuda.simple";  // the only kernel without sm_90a
    if (forced == "planar") return w.planar;
    if (forced == "ss") return w.ss;
    return w.automatic;
  };
  EXPECT_EQ(cases[0].got, want(fast_small)) << cases[0].what;
  EXPECT_EQ(cases[1].got, want(fast_small)) << cases[1].what;
  EXPECT_EQ(cases[2].got, want(fast_small)) << cases[2].what;
  EXPECT_EQ(cases[3].got, want(fast_wide)) << cases[3].what;
  EXPECT_EQ(cases[4].got, want(strided)) << cases[4].what;
  EXPECT_EQ(cases[5].got, "cuda.cublas_f32") << cases[5].what;  // whatever the setting
  // Nothing to multiply, and the call's own checks.
  EXPECT_EQ(dot_kernel_name(flex({64, 0}), flex({0, 128}), out), "none");
  EXPECT_THROW(dot_kernel_name(a, a, out), ShapeError);
}

// The plan is made on the first call of its class and reused: asking for a name counts as a
// use, and the call that follows finds the same plan.
TEST(Dot, KernelNameSharesTheCallsPlan) {
  if (!test::device().is_cuda()) GTEST_SKIP() << "the plan counters belong to the CUDA kernels";
  const Device d = test::device();
  const Array a = Array::zeros({72, 88}, DType::flex16, d);
  const Array b = Array::zeros({88, 40}, DType::flex16, d);
  Array out = Array::zeros({72, 40}, DType::flex16, d);
  const cuda::GemmPlanStats before = cuda::gemm_plan_stats();
  dot_kernel_name(a, b, out, {.iwl = 3});
  const cuda::GemmPlanStats named = cuda::gemm_plan_stats();
  EXPECT_EQ(named.plans_made, before.plans_made + 1);
  dot(a, b, out, {.iwl = 3});
  EXPECT_EQ(cuda::gemm_plan_stats().plans_made, named.plans_made);
  EXPECT_EQ(cuda::gemm_plan_stats().plan_hits, named.plan_hits + 1);
}

}  // namespace
}  // namespace flexkit
