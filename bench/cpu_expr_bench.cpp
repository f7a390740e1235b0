// CPU fused-expression throughput against this machine's memcpy bandwidth, both counted as
// bytes read + written: a 6-input expression over 2^26 f32 elements.
#include <cstdio>
#include <cstring>
#include <thread>

#include "bench_util.hpp"
#include "flexkit/expr.hpp"

using namespace flexkit;

int main() {
  const std::int64_t n = std::int64_t{1} << 26;
  const Device cpu = Device::cpu();
  Array a = bench::random_array({n}, DType::f32, cpu, 1);
  Array b = bench::random_array({n}, DType::f32, cpu, 2);
  Array c = bench::random_array({n}, DType::f32, cpu, 3);
  Array d = bench::random_array({n}, DType::f32, cpu, 4);
  Array e = bench::random_array({n}, DType::f32, cpu, 5);
  Array f = bench::random_array({n}, DType::f32, cpu, 6, 1.0f, 2.0f);
  Array out = Array::empty({n}, DType::f32, cpu);
  const double bytes_copy = 2.0 * static_cast<double>(a.nbytes());
  const double bytes_expr = 7.0 * static_cast<double>(a.nbytes());

  double copy_ms = bench::median_host_ms([&] { std::memcpy(out.data(), a.data(), a.nbytes()); }, 7);
  double expr_ms = bench::median_host_ms([&] { out = a * b + c * d - e / f; }, 7);
  double copy_gbs = bytes_copy / copy_ms / 1e6, expr_gbs = bytes_expr / expr_ms / 1e6;
  std::printf("\n| cpu benchmark (2^26 f32, %d threads)  |   ms      |   GB/s    | of memcpy |\n",
              static_cast<int>(std::thread::hardware_concurrency()));
  std::printf("|---------------------------------------|-----------|-----------|-----------|\n");
  std::printf("| memcpy (read + write)                 | %9.2f | %9.2f | %7.1f %% |\n", copy_ms,
              copy_gbs, 100.0);
  std::printf("| out = a*b + c*d - e/f (6 in, 1 out)   | %9.2f | %9.2f | %7.1f %% |\n", expr_ms,
              expr_gbs, 100.0 * expr_gbs / copy_gbs);
  return 0;
}
