// CPU GEMM throughput: flexkit's exact flex16 × flex16 and flex16 × u8 products and its f32
// GEMM, beside OpenBLAS SGEMM in the same process when CMake found OpenBLAS (the CPU
// target: flex16 GEMM ≥ the machine's OpenBLAS SGEMM). The kernels are called through
// gemm_cpu() with hand-built problems, so only the GEMM itself is timed.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "backend/cpu/gemm/gemm_kernels.hpp"
#include "backend/cpu/gemm_cpu.hpp"
#include "backend/cpu/thread_pool.hpp"

#if FLEXKIT_BENCH_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace {

using flexkit::gemm::ElementKind;
using flexkit::gemm::GemmProblem;

// Median wall time in ms over `repeats` runs after two warm-up runs.
double median_ms(const std::function<void()>& body, int repeats) {
  body();
  body();
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    body();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                    .count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

flexkit::portable::GemmEpilogue integer_epilogue(int scale) {
  flexkit::portable::GemmEpilogue e{};
  e.out_kind = flexkit::portable::GemmOutKind::flex16;
  e.integer_only = true;
  e.scale = scale;
  e.alpha = 1.0;
  e.acc_unit = e.old_unit = e.out_inv_unit = 1.0;
  e.reads_old = false;
  return e;
}

struct Shape {
  std::int64_t m, n, k;
};

struct Result {
  double flex16 = 0, u8 = 0, f32 = 0, blas = 0;  // GOP/s
};

// Operands of one shape: random mantissas, spikes (0/1 bytes) and floats in [-1, 1).
struct Operands {
  std::int64_t m, n, k;
  std::vector<std::int16_t> a16, b16, c16;
  std::vector<std::uint8_t> b8;
  std::vector<float> a32, b32, c32;
  Operands(const Shape& s, std::mt19937& rng)
      : m(s.m),
        n(s.n),
        k(s.k),
        a16(m * k),
        b16(k * n),
        c16(m * n),
        b8(k * n),
        a32(m * k),
        b32(k * n),
        c32(m * n) {
    for (auto& x : a16) x = static_cast<std::int16_t>(rng());
    for (auto& x : b16) x = static_cast<std::int16_t>(rng());
    for (auto& x : b8) x = static_cast<std::uint8_t>(rng() & 1);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto& x : a32) x = u(rng);
    for (auto& x : b32) x = u(rng);
  }
  double ops() const {
    return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  }
  int repeats() const { return ops() > 4e9 ? 5 : 11; }
};

void time_flexkit(Operands& o, Result& r) {
  auto gops = [&](double ms) { return o.ops() / ms / 1e6; };
  GemmProblem p;
  p.m = o.m, p.n = o.n, p.k = o.k;
  p.a = {o.a16.data(), ElementKind::flex16, o.k, 1, 0};
  p.b = {o.b16.data(), ElementKind::flex16, o.n, 1, 0};
  p.c = {o.c16.data(), ElementKind::flex16, o.n, 1, 0};
  p.epilogue = integer_epilogue(24);
  r.flex16 = gops(median_ms([&] { flexkit::gemm::gemm_cpu(p); }, o.repeats()));
  p.b = {o.b8.data(), ElementKind::u8, o.n, 1, 0};
  p.epilogue = integer_epilogue(8);
  r.u8 = gops(median_ms([&] { flexkit::gemm::gemm_cpu(p); }, o.repeats()));
  GemmProblem pf;
  pf.m = o.m, pf.n = o.n, pf.k = o.k;
  pf.a = {o.a32.data(), ElementKind::f32, o.k, 1, 0};
  pf.b = {o.b32.data(), ElementKind::f32, o.n, 1, 0};
  pf.c = {o.c32.data(), ElementKind::f32, o.n, 1, 0};
  r.f32 = gops(median_ms([&] { flexkit::gemm::gemm_cpu(pf); }, o.repeats()));
}

#if FLEXKIT_BENCH_HAVE_OPENBLAS
void time_openblas(Operands& o, Result& r) {
  const int m = static_cast<int>(o.m), n = static_cast<int>(o.n), k = static_cast<int>(o.k);
  const double ms = median_ms(
      [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, o.a32.data(), k,
                    o.b32.data(), n, 0.0f, o.c32.data(), n);
      },
      o.repeats());
  r.blas = o.ops() / ms / 1e6;
}
#endif

}  // namespace

int main() {
  // The last two are the GEMMs of a 1x1 convolution's fprop at batch 8 (C64 K256 56x56 and
  // C256 K64): a 64-deep reduction, where the per-tile widening and epilogue weigh most.
  const Shape shapes[] = {{256, 256, 256},    {512, 512, 512},   {1024, 1024, 1024},
                          {2048, 2048, 2048}, {256, 1024, 1024}, {256, 25088, 64},
                          {64, 25088, 256}};
  constexpr int kShapes = sizeof shapes / sizeof shapes[0];
  std::mt19937 rng(1);
  std::vector<Operands> operands;
  for (const Shape& s : shapes) operands.emplace_back(s, rng);
  Result results[kShapes];
  // OpenBLAS's worker threads spin for a while after loading and after each call, stealing the
  // cores from anything else; so flexkit is timed first, after they have gone to sleep, and
  // OpenBLAS last.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  for (int i = 0; i < kShapes; ++i) time_flexkit(operands[i], results[i]);
#if FLEXKIT_BENCH_HAVE_OPENBLAS
  for (int i = 0; i < kShapes; ++i) time_openblas(operands[i], results[i]);
#endif

  const char* isa_names[] = {"scalar", "avx2", "avx512"};
  std::printf("\nCPU GEMM, %d threads, flexkit kernels: %s; GOP/s = 2·m·n·k / median time\n\n",
              flexkit::backend::cpu::worker_count(),
              isa_names[static_cast<int>(flexkit::backend::cpu::gemm_detail::gemm_isa())]);
  std::printf(
      "| m × n × k          | flex16×flex16 | flex16×u8 | f32 (flexkit) | OpenBLAS SGEMM "
      "| flex16 / SGEMM | u8 / SGEMM |\n");
  std::printf(
      "|--------------------|---------------|-----------|---------------|----------------"
      "|----------------|------------|\n");
  for (int i = 0; i < kShapes; ++i) {
    const Result& r = results[i];
    char label[48];
    std::snprintf(label, sizeof label, "%lld × %lld × %lld", static_cast<long long>(shapes[i].m),
                  static_cast<long long>(shapes[i].n), static_cast<long long>(shapes[i].k));
    if (r.blas > 0) {
      std::printf("| %-22s | %13.1f | %9.1f | %13.1f | %14.1f | %14.2f | %10.2f |\n", label,
                  r.flex16, r.u8, r.f32, r.blas, r.flex16 / r.blas, r.u8 / r.blas);
    } else {
      std::printf("| %-22s | %13.1f | %9.1f | %13.1f | %14s | %14s | %10s |\n", label, r.flex16,
                  r.u8, r.f32, "n/a", "n/a", "n/a");
    }
  }
#if !FLEXKIT_BENCH_HAVE_OPENBLAS
  std::printf("\n(OpenBLAS not found at configure time: no SGEMM peer)\n");
#endif
  return 0;
}
