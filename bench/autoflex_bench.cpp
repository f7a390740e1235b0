// What Autoflex adds to a flex16 write on the GPU: a "step" of 48 flex16 tensors (sizes from 4 Ki
// to 2 Mi elements, as a small network's activations, gradients and weights), each written once
// by a fused expression, ending in one synchronisation as a training step does. The same step
// runs with IwlPolicy::fixed at the exponents Autoflex settled on (its peer: no prediction, no
// recording) and with IwlPolicy::autoflex, alternating, in one process.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "bench_util.hpp"
#include "flexkit/autoflex.hpp"
#include "flexkit/expr.hpp"

using namespace flexkit;

int main() {
  if (cuda::device_count() == 0) {
    std::fprintf(stderr, "bench_autoflex: no CUDA device\n");
    return 1;
  }
  const Device gpu = Device::cuda(0);
  std::vector<Array> inputs, outputs;
  double elements = 0;
  for (int t = 0; t < 48; ++t) {
    const std::int64_t n = std::int64_t{4096} << (t % 10);  // 4 Ki ... 2 Mi
    inputs.push_back(
        bench::random_array({n}, DType::f32, gpu, 10 + t, -0.5f * (1 + t % 5), 0.5f * (1 + t % 5)));
    outputs.push_back(Array::empty({n}, DType::flex16, gpu));
    elements += static_cast<double>(n);
  }
  const AssignOptions autoflex{.iwl_policy = IwlPolicy::autoflex};
  auto step = [&](const AssignOptions& options) {
    for (std::size_t t = 0; t < inputs.size(); ++t)
      assign(outputs[t], Expr(inputs[t]) * 0.75 + 0.125, options);
    cuda::synchronize(0);
  };
  for (int i = 0; i < 20; ++i) step(autoflex);  // settle the managers
  std::vector<int> settled;
  for (const Array& y : outputs) settled.push_back(y.autoflex().report().next_iwl);
  auto fixed_step = [&] {
    for (std::size_t t = 0; t < inputs.size(); ++t)
      assign(outputs[t], Expr(inputs[t]) * 0.75 + 0.125, {.iwl = settled[t]});
    cuda::synchronize(0);
  };
  std::vector<double> fixed_ms, auto_ms;
  for (int round = 0; round < 5; ++round) {
    fixed_ms.push_back(bench::median_host_ms(fixed_step, 41));
    auto_ms.push_back(bench::median_host_ms([&] { step(autoflex); }, 41));
  }
  std::sort(fixed_ms.begin(), fixed_ms.end());
  std::sort(auto_ms.begin(), auto_ms.end());
  const double f = fixed_ms[2], a = auto_ms[2];
  std::printf("| one step of 48 flex16 writes (%.1f M elements) | ms / step | per write (us) |\n",
              elements / 1e6);
  std::printf("|---|---|---|\n");
  std::printf("| IwlPolicy::fixed at the settled exponents | %.3f | %.2f |\n", f, 1e3 * f / 48);
  std::printf("| IwlPolicy::autoflex | %.3f | %.2f |\n", a, 1e3 * a / 48);
  std::printf("| Autoflex adds | %.3f (%+.1f %%) | %.2f |\n", a - f, 100 * (a - f) / f,
              1e3 * (a - f) / 48);
  return 0;
}
