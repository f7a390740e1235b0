// Copy rates on the GPU, measured with CUDA events (median of repeats after warm-up):
// the device-to-device copy (the ceiling C every rate is judged by), flexkit's contiguous assign
// (must equal it), its strided-copy kernel on a transpose, and host<->device transfers.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "flexkit/flexkit.hpp"
#include "gpu_timing.hpp"

namespace {

using flexkit::Array;
using flexkit::Device;
using flexkit::DType;

Array random_f32(std::int64_t rows, std::int64_t cols, Device device) {
  std::vector<float> v(static_cast<std::size_t>(rows * cols));
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto& x : v) x = u(rng);
  return Array::from_vector(v, {rows, cols}, device);
}

}  // namespace

int main() {
  if (flexkit::cuda::device_count() == 0) {
    std::fprintf(stderr, "bench_copy: no CUDA device\n");
    return 1;
  }
  const Device gpu = Device::cuda(0);
  const std::int64_t n = 16384;  // 16384^2 f32 = 1 GiB per operand, far beyond L2
  Array a = random_f32(n, n, gpu);
  Array b = Array::empty({n, n}, DType::f32, gpu);
  const double bytes = 2.0 * static_cast<double>(a.nbytes());  // read + write

  double raw = flexkit::bench::median_gpu_ms(
      [&] { cudaMemcpyAsync(b.data(), a.data(), a.nbytes(), cudaMemcpyDeviceToDevice, nullptr); });
  double assign = flexkit::bench::median_gpu_ms([&] { b.assign(a); });
  Array at = a.T();
  double transpose = flexkit::bench::median_gpu_ms([&] { b.assign(at); });
  Array half = a.index(":, ::2");
  Array half_out = Array::empty({n, n / 2}, DType::f32, gpu);
  double strided = flexkit::bench::median_gpu_ms([&] { half_out.assign(half); });
  double fill = flexkit::bench::median_gpu_ms([&] { b.fill(1.5); });

  Array host = Array::empty({n / 4, n}, DType::f32, Device::cpu());
  Array dev_part = a.index(":4096");
  double d2h = flexkit::bench::median_gpu_ms([&] { host.assign(dev_part); });
  double h2d = flexkit::bench::median_gpu_ms([&] { dev_part.assign(host); });

  const double c = bytes / raw / 1e6;  // GB/s
  auto row = [&](const char* name, double ms, double moved) {
    double rate = moved / ms / 1e6;
    std::printf("| %-38s | %9.3f | %9.1f | %5.1f %% |\n", name, ms, rate, 100.0 * rate / c);
  };
  std::printf("\n| copy benchmark (f32, 1 GiB operands)  |   ms      |   GB/s    | of C    |\n");
  std::printf("|----------------------------------------|-----------|-----------|---------|\n");
  row("cudaMemcpy device-to-device (= C)", raw, bytes);
  row("Array::assign contiguous", assign, bytes);
  row("Array::assign from transposed view", transpose, bytes);
  row("Array::assign from a[:, ::2]", strided, bytes / 2);
  row("Array::fill (write only)", fill, bytes / 2);
  row("device -> host, 256 MiB pageable", d2h, static_cast<double>(host.nbytes()));
  row("host -> device, 256 MiB pageable", h2d, static_cast<double>(host.nbytes()));
  return 0;
}
