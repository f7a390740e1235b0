// Fused expressions on the GPU against the device's copy rate C, measured in the same process:
// elementwise trees, a bf16/flex16/f32 mix, row and column reductions, softmax, and the cost of
// the first call (compile), of a disk-cache hit and of a warm call. bench/torch_peers.py runs
// PyTorch eager and torch.compile on the same shapes in the same GPU script run.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>

#include "bench_util.hpp"
#include "flexkit/expr.hpp"
#include "gpu_timing.hpp"

using namespace flexkit;

namespace {

double c_gbs = 0;

void row(const char* name, double ms, double bytes) {
  double gbs = bytes / ms / 1e6;
  std::printf("| %-44s | %8.3f | %8.1f | %6.1f %% |\n", name, ms, gbs, 100.0 * gbs / c_gbs);
}

}  // namespace

int main() {
  if (cuda::device_count() == 0) {
    std::fprintf(stderr, "bench_expr: no CUDA device\n");
    return 1;
  }
  // A private cache directory, so the first call really compiles.
  auto cache = std::filesystem::temp_directory_path() / "flexkit-bench-cache";
  std::filesystem::remove_all(cache);
  setenv("FLEXKIT_CACHE_DIR", cache.c_str(), 1);

  const Device gpu = Device::cuda(0);
  const std::int64_t n = std::int64_t{1} << 27;
  Array a = bench::random_array({n}, DType::f32, gpu, 1);
  Array b = bench::random_array({n}, DType::f32, gpu, 2);
  Array c = bench::random_array({n}, DType::f32, gpu, 3);
  Array d = bench::random_array({n}, DType::f32, gpu, 4);
  Array e = bench::random_array({n}, DType::f32, gpu, 5);
  Array out = Array::empty({n}, DType::f32, gpu);
  const double f32_bytes = static_cast<double>(a.nbytes());

  double copy_ms = bench::median_gpu_ms([&] {
    cudaMemcpyAsync(out.data(), a.data(), a.nbytes(), cudaMemcpyDeviceToDevice, nullptr);
  });
  c_gbs = 2 * f32_bytes / copy_ms / 1e6;

  // Latency of the first call (generate + NVRTC + load + run), of a disk hit, of a warm call.
  auto timed = [&](const std::function<void()>& f) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    cuda::synchronize(0);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  double cold = timed([&] { out = sig(a * b + c) * d - e; });
  cuda::clear_kernel_memory_cache();
  double disk = timed([&] { out = sig(a * b + c) * d - e; });
  double warm = timed([&] { out = sig(a * b + c) * d - e; });

  double ew = bench::median_gpu_ms([&] { out = sig(a * b + c) * d - e; });

  Array hb = bench::random_array({n}, DType::bf16, gpu, 6);
  Array hf = bench::random_array({n}, DType::flex16, gpu, 7);
  Array mix_out = Array::empty({n}, DType::bf16, gpu);
  double mix = bench::median_gpu_ms([&] { mix_out = hb * hf + c; });
  Array flex_out = Array::empty({n}, DType::flex16, gpu);
  flex_out.set_iwl(1);
  double mix_flex = bench::median_gpu_ms([&] { flex_out = hb * hf - hf; });

  Array m = bench::random_array({8192, 16384}, DType::f32, gpu, 8);
  Array rows = Array::empty({8192, 1}, DType::f32, gpu);
  Array cols = Array::empty({1, 16384}, DType::f32, gpu);
  double row_sum = bench::median_gpu_ms([&] { rows = sum(m, 1); });
  double col_max = bench::median_gpu_ms([&] { cols = max(m, 0); });

  Array s = bench::random_array({4096, 32768}, DType::f32, gpu, 9, -4.0f, 4.0f);
  Array p = Array::empty({4096, 32768}, DType::f32, gpu);
  double softmax =
      bench::median_gpu_ms([&] { p = exp(s - max(s, 1)) / sum(exp(s - max(s, 1)), 1); });
  Array sub = Array::empty({4096, 32768}, DType::f32, gpu);
  double sub_max = bench::median_gpu_ms([&] { sub = s - max(s, 1); });
  // The reduced axis not the innermost: each column's max broadcast down the column.
  double sub_col_max = bench::median_gpu_ms([&] { sub = s - max(s, 0); });

  std::printf(
      "\n| fused expressions (medians of %d, CUDA events)  |    ms    |   GB/s   |  of C   |\n",
      bench::kRepeats);
  std::printf("|----------------------------------------------|----------|----------|---------|\n");
  row("cudaMemcpy D2D 512 MiB (= C)", copy_ms, 2 * f32_bytes);
  row("sig(a*b+c)*d-e, 2^27 f32", ew, 6 * f32_bytes);
  row("bf16 = bf16*flex16 + f32, 2^27", mix, 10.0 * n);
  row("flex16 = bf16*flex16 - flex16, 2^27", mix_flex, 8.0 * n);
  row("sum(A, 1), 8192x16384 f32", row_sum, 8192.0 * 16384 * 4);
  row("max(A, 0), 8192x16384 f32", col_max, 8192.0 * 16384 * 4);
  row("A - max(A, 1), 4096x32768 f32", sub_max, 2.0 * 4096 * 32768 * 4);
  row("A - max(A, 0), 4096x32768 f32", sub_col_max, 2.0 * 4096 * 32768 * 4);
  row("softmax rows, 4096x32768 f32", softmax, 2.0 * 4096 * 32768 * 4);
  std::printf("\n| call latency, sig(a*b+c)*d-e       |    ms    |\n");
  std::printf("|------------------------------------|----------|\n");
  std::printf("| first call (generate+NVRTC+run)    | %8.2f |\n", cold);
  std::printf("| new process, disk cache hit + run  | %8.2f |\n", disk);
  std::printf("| warm call (memory cache) + run     | %8.2f |\n", warm);
  cuda::KernelCacheStats st = cuda::kernel_cache_stats();
  std::printf("kernel cache: %llu compiles, %llu disk hits, %llu memory hits\n",
              static_cast<unsigned long long>(st.compiles),
              static_cast<unsigned long long>(st.disk_hits),
              static_cast<unsigned long long>(st.memory_hits));
  return 0;
}
