// FlexSN LIF on the GPU against the device's copy rate C, measured in the same process: the
// benchmark shape (T = 32, batch 64, 224x224 neurons, sigmoid(4)), inference and
// forward+backward, the built-in LIF beside the same LIF written as plain neuron-language text,
// T = 4 and 128, u8 spikes and bf16/flex16 residuals with their memory. bench/torch_lif.py
// measures the torch.compile'd PyTorch loop on the same shapes in the same GPU script run.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

#include "bench_util.hpp"
#include "flexkit/neuron.hpp"
#include "gpu_timing.hpp"

using namespace flexkit;

namespace {

double c_gbs = 0;

void row(const std::string& name, double ms, double bytes, const char* note = "") {
  const double gbs = bytes / ms / 1e6;
  std::printf("| %-52s | %8.3f | %8.1f | %6.1f %% | %s\n", name.c_str(), ms, gbs,
              100.0 * gbs / c_gbs, note);
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
  std::size_t residual_bytes = 0;
};

Timing measure(const Neuron& neuron, const Array& x, const Array& gs, NeuronStorage storage) {
  Timing t;
  t.inference_ms = bench::median_gpu_ms([&] {
    neuron_forward(neuron, NeuronKernelKind::inference_final_state, {{"x", x}}, {}, {}, storage);
  });
  NeuronForward f =
      neuron_forward(neuron, NeuronKernelKind::training_forward, {{"x", x}}, {}, {}, storage);
  t.residual_bytes = residual_bytes(*f.residuals);
  t.fwd_ms = bench::median_gpu_ms([&] {
    f = neuron_forward(neuron, NeuronKernelKind::training_forward, {{"x", x}}, {}, {}, storage);
  });
  t.bwd_ms = bench::median_gpu_ms([&] { neuron_backward(neuron, *f.residuals, {{"s", gs}}); });
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

  for (std::int64_t steps : {32, 4, 128}) {
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
    if (steps != 32) continue;

    NeuronStorage u8_spikes;
    u8_spikes.spike_dtype = DType::u8;
    const double u8_ms = bench::median_gpu_ms([&] {
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
