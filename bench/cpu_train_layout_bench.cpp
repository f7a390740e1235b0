// The activation layout of training, measured on the CPU: a spiking layer reading and writing
// (F, T, N) in place (the layout the trainer uses, where Linear sees T·N as its batch) against
// the alternative of the neuron kernels' [T, F, N], which needs a transposing copy in and out
// around every neuron call (or per-step products in Linear). The shapes are the mlp preset's
// hidden layer: F = 512, T = 4, N = 128.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>

#include "flexkit/expr.hpp"
#include "flexkit/neuron.hpp"

using namespace flexkit;

namespace {

constexpr std::int64_t kF = 512, kT = 4, kN = 128;

Array input() {
  std::vector<float> v(static_cast<std::size_t>(kF * kT * kN));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 7919) % 997) / 400.0f;
  return Array::from_vector(v, {kF, kT, kN});
}

// The best of `repeats` timings of `body`, in microseconds.
double best_us(const std::function<void()>& body, int repeats = 30) {
  double best = 1e300;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    body();
    best = std::min(
        best, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                  .count());
  }
  return best;
}

}  // namespace

int main() {
  const Neuron lif = Neuron::builtin("lif");
  const Array x = input();
  const Array grad = Array::full({kF, kT, kN}, 0.5, DType::f32);
  NeuronStorage storage;
  storage.time_axis = 1;
  const double in_place = best_us([&] {
    NeuronForward f =
        neuron_forward(lif, NeuronKernelKind::training_forward, {{"x", x}}, {}, {}, storage);
    NeuronGradients g = neuron_backward(lif, *f.residuals, {{"s", grad}});
  });
  const double transposed = best_us([&] {
    const Array xt = x.transpose({1, 0, 2}).contiguous();
    NeuronForward f = neuron_forward(lif, NeuronKernelKind::training_forward, {{"x", xt}});
    const Array s = f.outputs.at("s").transpose({1, 0, 2}).contiguous();
    const Array gt = grad.transpose({1, 0, 2}).contiguous();
    NeuronGradients g = neuron_backward(lif, *f.residuals, {{"s", gt}});
    const Array gx = g.inputs.at("x").transpose({1, 0, 2}).contiguous();
  });
  std::printf("| LIF forward + backward, (F, T, N) = (%lld, %lld, %lld), cpu | us |\n",
              static_cast<long long>(kF), static_cast<long long>(kT), static_cast<long long>(kN));
  std::printf(
      "|---|---|\n| in place, T at axis 1 | %.0f |\n| transposing copies to [T, F, N] and back "
      "| %.0f |\n",
      in_place, transposed);
}
