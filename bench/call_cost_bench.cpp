// The host cost of one warm fused-expression call on CUDA, whole and by part: what a training
// step of many small writes pays per call before the GPU does anything. Each part is timed over
// many repeats of that part alone on the same 1,024-element call; the whole call is timed over
// back-to-back calls without waiting for the GPU (its kernels take less time than the host's
// part, so the launch queue never fills and the host time is what the loop measures).
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <functional>

#include "backend/cuda/kernel_cache.hpp"
#include "backend/cuda/launch_support.hpp"
#include "bench_util.hpp"
#include "codegen/cuda_expr_source.hpp"
#include "flexkit/cuda.hpp"
#include "flexkit/expr.hpp"
#include "ir/assign_signature.hpp"
#include "ir/plan.hpp"

using namespace flexkit;

namespace {

// Mean host µs of f over `repeats` calls (after a warm-up), then one wait for the GPU, which is
// not counted.
double host_us(const std::function<void()>& f, int repeats = 20000) {
  for (int i = 0; i < 200; ++i) f();
  cuda::synchronize(0);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < repeats; ++i) f();
  const auto t1 = std::chrono::steady_clock::now();
  cuda::synchronize(0);
  return std::chrono::duration<double, std::micro>(t1 - t0).count() / repeats;
}

void row(const char* name, double us) {
  std::printf("| %-58s | %7.2f |\n", name, us);
}

}  // namespace

int main() {
  if (cuda::device_count() == 0) {
    std::fprintf(stderr, "bench_call_cost: no CUDA device\n");
    return 1;
  }
  const Device gpu = Device::cuda(0);
  const std::int64_t n = 1024;
  Array a = bench::random_array({n}, DType::f32, gpu, 1);
  Array b = bench::random_array({n}, DType::f32, gpu, 2);
  Array c = bench::random_array({n}, DType::f32, gpu, 3);
  Array d = bench::random_array({n}, DType::f32, gpu, 4);
  Array e = bench::random_array({n}, DType::f32, gpu, 5);
  Array out = Array::empty({n}, DType::f32, gpu);
  Array flex_out = Array::empty({n}, DType::flex16, gpu);
  flex_out.set_iwl(2);

  const double whole = host_us([&] { out = sig(a * b + c) * d - e; });
  const Expr built = sig(a * b + c) * d - e;
  const double prebuilt = host_us([&] { assign(out, built); });
  const double flex_fixed =
      host_us([&] { assign(flex_out, built, {.iwl_policy = IwlPolicy::fixed}); });
  const double flex_auto =
      host_us([&] { assign(flex_out, built, {.iwl_policy = IwlPolicy::autoflex}); });
  // A fused plan (three stages, two temporaries): softmax over 64 rows of 1,024.
  Array rows = bench::random_array({64, 1024}, DType::f32, gpu, 6);
  Array rows_out = Array::empty({64, 1024}, DType::f32, gpu);
  const Expr softmax = exp(rows - max(rows, 1)) / sum(exp(rows - max(rows, 1)), 1);
  const double softmax_us = host_us([&] { assign(rows_out, softmax); });

  // The parts, in the order a call runs them: the signature, then (on a structure not seen
  // before, or after clear_kernel_memory_cache) planning, describing and the cache lookup.
  const double build = host_us([&] {
    Expr x = sig(a * b + c) * d - e;
    (void)x;
  });
  const double sign = host_us([&] {
    ir::AssignSignature s;
    (void)ir::sign_assignment(out, built.node(), {}, s);
  });
  const double plan = host_us([&] {
    ir::Plan p = ir::make_plan(out, built.node(), {});
    (void)p;
  });
  const ir::Plan p = ir::make_plan(out, built.node(), {});
  const double describe = host_us([&] {
    codegen::ExprKernel k = codegen::describe_stage(p.stages[0]);
    (void)k;
  });
  codegen::ExprKernel kernel = codegen::describe_stage(p.stages[0]);
  auto source = [&] { return codegen::generate_source(kernel, p.stages[0].body); };
  auto& cache = backend::cuda::KernelCache::instance();
  const double lookup = host_us([&] { (void)cache.get(0, kernel.key, source); });
  auto module = cache.get(0, kernel.key, source);
  const double geometry = host_us([&] {
    codegen::ExprLaunch l = codegen::plan_launch(kernel, backend::cuda::multiprocessors(0));
    (void)l;
  });
  codegen::ExprLaunch launch = codegen::plan_launch(kernel, backend::cuda::multiprocessors(0));
  void* none = nullptr;
  std::vector<void*> params{&kernel.target};
  for (codegen::ExprOperand& o : kernel.operands) params.push_back(&o);
  if (!kernel.scalars.empty()) params.push_back(kernel.scalars.data());
  params.push_back(&launch.args);
  params.push_back(&none);
  params.push_back(&none);
  const double launch_us = host_us([&] {
    module->launch(codegen::kMainKernel, launch.main.grid_x * launch.main.grid_y,
                   launch.main.block_x * launch.main.block_y, params.data());
  });

  // The CUDA runtime's floor: an empty kernel with one pointer parameter, launched the same way.
  auto empty = cache.get(0, "bench_call_cost_empty", [] {
    return std::string(
        "#include \"flexkit/rtc_prelude.cuh\"\n"
        "FLEXKIT_KERNEL void empty_kernel(const void* p) {}\n");
  });
  void* empty_params[] = {&none};
  const double empty_us = host_us([&] { empty->launch("empty_kernel", 1, 32, empty_params); });
  // The same with its handle and the stream asked for once: the CUDA runtime alone.
  void* empty_handle = empty->kernel("empty_kernel", 0);
  void* stream = cuda::current_stream(0);
  const double runtime_us =
      host_us([&] { backend::cuda::launch_kernel(empty_handle, 1, 32, empty_params, 0, stream); });

  std::printf("\n| host time of one warm call on 1,024 f32 elements           |   µs    |\n");
  std::printf("|------------------------------------------------------------|---------|\n");
  row("out = sig(a*b+c)*d-e (the whole call, the Expr built)", whole);
  row("assign(out, prebuilt Expr)", prebuilt);
  row("assign(flex16 out, prebuilt Expr), IwlPolicy::fixed", flex_fixed);
  row("assign(flex16 out, prebuilt Expr), IwlPolicy::autoflex", flex_auto);
  row("assign(softmax over 64 rows of 1,024, prebuilt Expr)", softmax_us);
  row("part: building the Expr (5 operands, 7 nodes)", build);
  row("part: ir::sign_assignment (the reuse path's own cost)", sign);
  std::printf("| %-58s | %7s |\n", "on a new structure only:", "");
  row("part: ir::make_plan", plan);
  row("part: codegen::describe_stage (description and cache key)", describe);
  row("part: kernel cache lookup (memory hit)", lookup);
  row("part: launch geometry", geometry);
  row("part: the module's launch (the CUDA runtime's part)", launch_us);
  row("an empty kernel's launch (one pointer parameter)", empty_us);
  row("the same, handle and stream kept (the CUDA runtime alone)", runtime_us);
  return 0;
}
