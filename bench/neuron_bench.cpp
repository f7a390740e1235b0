// FlexSN LIF on the GPU against the device's copy rate C, measured in the same process: the
// benchmark shape (T = 32, batch 64, 224x224 neurons, sigmoid(4)), inference and
// forward+backward, the built-in LIF beside the same LIF written as plain neuron-language text,
// T = 4, 8 and 128, u8 spikes and bf16/flex16 residuals with their memory, and PLIF (learnable w,
// its gradient reduced) at T = 8. bench/torch_lif.py measures the torch.compile'd PyTorch loop on
// the same shapes in the same GPU script run.
//
// Times are the GPU's: before each timed call a 512 MiB memset is queued (it also evicts L2), so
// the host prepares the call while the GPU is busy, as in a training step, and the events time
// the launches themselves (launch latency and wave tails included, host work not). The per-call
// column (events around a call on an idle GPU, host work included) is printed for short T,
// where the host part weighs.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "flexkit/neuron.hpp"
#include "gpu_timing.hpp"

using namespace flexkit;

namespace {

double c_gbs = 0;

void row(const std::string& name, double ms, double bytes, const std::string& note = "") {
  const double gbs = bytes / ms / 1e6;
  std::printf("| %-52s | %8.3f | %8.1f | %6.1f %% | %s\n", name.c_str(), ms, gbs,
              100.0 * gbs / c_gbs, note.c_str());
}

// The median GPU time of `body` with its host work hidden behind a memset queued before it.
double device_ms(const std::function<void()>& body) {
  static void* scratch = nullptr;
  constexpr std::size_t kScratch = std::size_t{512} << 20;
  if (!scratch && cudaMalloc(&scratch, kScratch) != cudaSuccess) {
    std::fprintf(stderr, "bench_neuron: cudaMalloc of the scratch failed\n");
    std::exit(1);
  }
  const double ms = bench::median_gpu_ms(body, bench::kWarmup, bench::kRepeats, [](int i) {
    cudaMemsetAsync(scratch, i & 0xff, kScratch, nullptr);
  });
  if (cudaGetLastError() != cudaSuccess) {
    std::fprintf(stderr, "bench_neuron: a CUDA call failed\n");
    std::exit(1);
  }
  return ms;
}

constexpr const char* kPlainLif = R"(neuron plain_lif(x; v) -> s {
  h = v + (x - v) / 2.0;
  s = spike(h - 1.0, sigmoid(4));
  v = h * (1 - s);
})";

struct Timing {
  double inference_ms = 0;  // outputs and final state only (minimal traffic)
  double fwd_ms = 0;
  double bwd_ms = 0;
  double call_fwd_bwd_ms = 0;  // events around each call on an idle GPU: host work included
  std::size_t residual_bytes = 0;
};

Timing measure(const Neuron& neuron, const Array& x, const Array& gs, NeuronStorage storage) {
  Timing t;
  t.inference_ms = device_ms([&] {
    neuron_forward(neuron, NeuronKernelKind::inference_final_state, {{"x", x}}, {}, {}, storage);
  });
  NeuronForward f =
      neuron_forward(neuron, NeuronKernelKind::training_forward, {{"x", x}}, {}, {}, storage);
  t.residual_bytes = residual_bytes(*f.residuals);
  const auto fwd = [&] {
    f = neuron_forward(neuron, NeuronKernelKind::training_forward, {{"x", x}}, {}, {}, storage);
  };
  const auto bwd = [&] {
    NeuronGradients g = neuron_backward(neuron, *f.residuals, {{"s", gs}});
    for (const NeuronParamInfo& p : neuron.params())  // a learnable parameter's gradient is used
      if (p.learnable && !g.params.at(p.name).defined()) std::exit(1);
  };
  t.fwd_ms = device_ms(fwd);
  t.bwd_ms = device_ms(bwd);
  t.call_fwd_bwd_ms = bench::median_gpu_ms(fwd) + bench::median_gpu_ms(bwd);
  return t;
}

}  // namespace

int main() {
  if (cuda::device_count() == 0) {
    std::fprintf(stderr, "bench_neuron: no CUDA device\n");
    return 1;
  }
  const Device gpu = Device::cuda(0);
  const std::int64_t batch = 64, side = 224;

  {
    Array a = bench::random_array({std::int64_t{1} << 27}, DType::f32, gpu, 1);
    Array b = Array::empty(a.shape(), DType::f32, gpu);
    const double ms = bench::median_gpu_ms([&] {
      cudaMemcpyAsync(b.data(), a.data(), a.nbytes(), cudaMemcpyDeviceToDevice, nullptr);
    });
    c_gbs = 2.0 * static_cast<double>(a.nbytes()) / ms / 1e6;
  }

  const Neuron lif = Neuron::builtin("lif");
  const Neuron plain = Neuron::parse(kPlainLif);
  std::printf("\nFlexSN LIF, batch %lld, %lldx%lld neurons, sigmoid(4); C = %.1f GB/s\n\n",
              static_cast<long long>(batch), static_cast<long long>(side),
              static_cast<long long>(side), c_gbs);
  std::printf("| %-52s | %8s | %8s | %8s |\n", "kernel", "ms", "GB/s", "of C");
  std::printf("|---|---|---|---|\n");

  for (std::int64_t steps : {32, 4, 8, 128}) {
    const Shape shape{steps, batch, side, side};
    Array x = bench::random_array(shape, DType::f32, gpu, 2, 0.0f, 1.5f);
    Array gs = bench::random_array(shape, DType::f32, gpu, 3);
    const double ns = static_cast<double>(x.size());  // neuron-steps
    const std::string tag = "T=" + std::to_string(steps) + " ";

    Timing t = measure(lif, x, gs, {});
    row(tag + "lif inference f32 -> f32 spikes", t.inference_ms, 8 * ns);
    row(tag + "lif training forward (x -> s, h)", t.fwd_ms, 12 * ns);
    row(tag + "lif backward (gs, h -> gx)", t.bwd_ms, 12 * ns);
    row(tag + "lif forward+backward", t.fwd_ms + t.bwd_ms, 24 * ns);
    if (steps <= 8) {
      char note[96];
      std::snprintf(note, sizeof note, "per call, host work included: %.3f ms (%.1f %% of C)",
                    t.call_fwd_bwd_ms, 100.0 * 24 * ns / t.call_fwd_bwd_ms / 1e6 / c_gbs);
      row(tag + "lif forward+backward (per call)", t.call_fwd_bwd_ms, 24 * ns, note);
    }
    if (steps == 8) {
      // PLIF: 1/tau = sig(w), w learnable (one scalar), its gradient the sum of per-neuron
      // partials in a fixed order. Its residual plan stores more than LIF's one value per
      // neuron-step; the bytes moved count them, and the per-neuron values (final state, the
      // initial state's gradient, the w partials written and read back by the reduction).
      const Neuron plif = Neuron::builtin("plif");
      const double r = static_cast<double>(plif.residual_plan().size());
      const double neurons = static_cast<double>(batch * side * side);
      const double moved = (16 + 8 * r) * ns + 16 * neurons;
      Timing q = measure(plif, x, gs, {});
      char note[160];
      std::snprintf(note, sizeof note,
                    "%.0f residuals per step: %.0f B per step moved, %.1f %% of C on those; "
                    "per call %.3f ms",
                    r, moved / ns, 100.0 * moved / (q.fwd_ms + q.bwd_ms) / 1e6 / c_gbs,
                    q.call_fwd_bwd_ms);
      row(tag + "plif training forward (x -> s, residuals)", q.fwd_ms, (8 + 4 * r) * ns);
      row(tag + "plif backward (gs, residuals -> gx, grad w)", q.bwd_ms, (8 + 4 * r) * ns);
      row(tag + "plif forward+backward (24 B counted)", q.fwd_ms + q.bwd_ms, 24 * ns, note);
      // The same with the residuals kept in bf16 (NeuronStorage::residual_dtype): 2 bytes each.
      NeuronStorage half;
      half.residual_dtype = DType::bf16;
      Timing b = measure(plif, x, gs, half);
      const double half_moved = (16 + 4 * r) * ns + 16 * neurons;
      std::snprintf(note, sizeof note, "%.0f B per step moved, %.1f %% of C on those",
                    half_moved / ns, 100.0 * half_moved / (b.fwd_ms + b.bwd_ms) / 1e6 / c_gbs);
      row(tag + "plif forward+backward, bf16 residuals (24 B counted)", b.fwd_ms + b.bwd_ms,
          24 * ns, note);
    }
    if (steps != 32) continue;

    NeuronStorage u8_spikes;
    u8_spikes.spike_dtype = DType::u8;
    const double u8_ms = device_ms([&] {
      neuron_forward(lif, NeuronKernelKind::inference_final_state, {{"x", x}}, {}, {}, u8_spikes);
    });
    row(tag + "lif inference f32 -> u8 spikes (5 B/step)", u8_ms, 5 * ns);

    Timing p = measure(plain, x, gs, {});
    row(tag + "plain-text LIF inference", p.inference_ms, 8 * ns);
    row(tag + "plain-text LIF forward+backward", p.fwd_ms + p.bwd_ms, 24 * ns);
    std::printf("| %-52s | %8.3f | %8s | %8s |\n", "plain-text / built-in, forward+backward",
                (p.fwd_ms + p.bwd_ms) / (t.fwd_ms + t.bwd_ms), "", "");

    for (DType residual : {DType::bf16, DType::flex16}) {
      NeuronStorage s;
      s.residual_dtype = residual;
      Timing r = measure(lif, x, gs, s);
      char note[96];
      std::snprintf(note, sizeof note, "residuals %.0f MiB vs %.0f MiB f32",
                    static_cast<double>(r.residual_bytes) / (1 << 20),
                    static_cast<double>(t.residual_bytes) / (1 << 20));
      row(tag + "lif forward+backward, " + std::string(dtype_name(residual)) + " residual",
          r.fwd_ms + r.bwd_ms, 20 * ns, note);
    }
    std::printf("| %-52s | %8.3f | %8s | %8s |\n",
                "SpikingJelly Triton LIF fwd+bwd (published) / ours", 2.159 / (t.fwd_ms + t.bwd_ms),
                "", "");
  }
  return 0;
}
