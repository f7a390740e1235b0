// Convolution on the CPU backend: ConvPlan fprop / bprop / update in exact flex16 (fixed output
// iwl) and in f32, each beside the "same K" GEMM in the same process — flexkit::dot with
// M = K_out, N = P·Q·N_batch, K = C·R·S, the product a lowered convolution would run — and, when
// CMake found OpenBLAS, cblas_sgemm on that shape. Every direction does 2·N·K·C·R·S·P·Q
// operations; rates count exactly that. Batch 8 (a 2-core machine runs the whole set in about a
// minute). Times are medians of whole calls after warm-up, wall clock.
//
// Environment:
//   CPU_CONV_CSV  also write one line per layer and direction to this file, with the geometry,
//                 for bench/torch_cpu_conv.py (PyTorch's CPU convolution on the same layers):
//                 layer,direction,c,k,hw,rs,pad,stride,batch,flex16_gops,f32_gops
//   CPU_CONV_LAYERS  which layers: all (the default), 3x3, 1x1 or layer names, comma-separated
//                 (e.g. "3x3 C256 K256 14x14"; spaces and case ignored).
// The Markdown table (lines starting with '|') goes to stdout, progress to stderr.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.hpp"
#include "flexkit/conv.hpp"
#include "flexkit/flexkit.hpp"
#include "flexkit/gemm.hpp"

#if FLEXKIT_BENCH_HAVE_OPENBLAS
#include <cblas.h>
#endif

using namespace flexkit;
using namespace flexkit::bench;
using i64 = std::int64_t;

namespace {

constexpr i64 kBatch = 8;
constexpr int kTimedCalls = 7;
const Device kCpu = Device::cpu();

struct Layer {
  std::string name;
  i64 c, k, hw, rs, pad, stride;
  i64 pq() const { return (hw + 2 * pad - rs) / stride + 1; }
  bool pointwise() const { return rs == 1; }
  double ops() const {
    return 2.0 * static_cast<double>(kBatch * k * c * rs * rs) * static_cast<double>(pq() * pq());
  }
};

// The ResNet-shaped layers of bench_conv at batch 8, and a stride-2 3x3 (bprop's strided path).
std::vector<Layer> layers() {
  return {{"3x3 C64 K64 56x56", 64, 64, 56, 3, 1, 1},
          {"3x3 C128 K128 28x28", 128, 128, 28, 3, 1, 1},
          {"3x3 C256 K256 14x14", 256, 256, 14, 3, 1, 1},
          {"3x3 C64 K128 56x56 stride 2", 64, 128, 56, 3, 1, 2},
          {"1x1 C64 K256 56x56", 64, 256, 56, 1, 0, 1},
          {"1x1 C256 K64 56x56", 256, 64, 56, 1, 0, 1}};
}

// A sum of `terms` products of values uniform in [-1, 1) has std sqrt(terms) / 3: an output range
// of six of those above the operands' exponents holds practically every entry.
int output_iwl(const Array& a, const Array& b, i64 terms) {
  return a.iwl() + b.iwl() +
         static_cast<int>(std::ceil(std::log2(2.0 * std::sqrt(static_cast<double>(terms)))));
}

double gops(double ops, double ms) {
  return ops / (ms * 1e6);
}

enum Dir { kFprop, kBprop, kUpdate, kDirs };
const char* const kDirNames[kDirs] = {"fprop", "bprop", "update"};

struct Rates {
  double flex16[kDirs] = {}, f32[kDirs] = {};
  double gemm_flex16 = 0, gemm_f32 = 0, sgemm = 0;  // the same-K products
};

// One direction of one layer in one element type, GOP/s.
double time_conv(const Layer& l, const ConvPlan& plan, Dir dir, DType dtype, unsigned seed) {
  const Shape in = plan.input_shape(), flt = plan.filter_shape(), out = plan.output_shape();
  const Array x = random_array(in, dtype, kCpu, seed);
  const Array f = random_array(flt, dtype, kCpu, seed + 1);
  const Array e = random_array(out, dtype, kCpu, seed + 2);
  const Array result = Array::empty(dir == kFprop ? out : dir == kBprop ? in : flt, dtype, kCpu);
  ConvOptions o;
  if (dtype == DType::flex16) {
    const i64 terms[kDirs] = {l.c * l.rs * l.rs, l.k * l.rs * l.rs, kBatch * l.pq() * l.pq()};
    const Array& a = dir == kBprop ? f : x;
    const Array& b = dir == kFprop ? f : e;
    o.iwl_policy = IwlPolicy::fixed;
    o.iwl = output_iwl(a, b, terms[dir]);
  }
  const double ms = median_host_ms(
      [&] {
        if (dir == kFprop) plan.fprop(x, f, result, o);
        if (dir == kBprop) plan.bprop(f, e, result, o);
        if (dir == kUpdate) plan.update(x, e, result, o);
      },
      kTimedCalls);
  return gops(l.ops(), ms);
}

void time_gemms(const Layer& l, Rates& r, unsigned seed) {
  const i64 m = l.k, depth = l.c * l.rs * l.rs, n = l.pq() * l.pq() * kBatch;
  for (DType dtype : {DType::flex16, DType::f32}) {
    const Array a = random_array({m, depth}, dtype, kCpu, seed);
    const Array b = random_array({depth, n}, dtype, kCpu, seed + 1);
    const Array out = Array::empty({m, n}, dtype, kCpu);
    DotOptions o;
    if (dtype == DType::flex16) o.iwl = output_iwl(a, b, depth);
    const double ms = median_host_ms([&] { dot(a, b, out, o); }, kTimedCalls);
    (dtype == DType::flex16 ? r.gemm_flex16 : r.gemm_f32) = gops(l.ops(), ms);
  }
#if FLEXKIT_BENCH_HAVE_OPENBLAS
  const std::vector<float> a = random_array({m, depth}, DType::f32, kCpu, seed).to_vector<float>();
  const std::vector<float> b = random_array({depth, n}, DType::f32, kCpu, seed).to_vector<float>();
  std::vector<float> c(static_cast<std::size_t>(m * n));
  const double ms = median_host_ms(
      [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m),
                    static_cast<int>(n), static_cast<int>(depth), 1.0f, a.data(),
                    static_cast<int>(depth), b.data(), static_cast<int>(n), 0.0f, c.data(),
                    static_cast<int>(n));
      },
      kTimedCalls);
  r.sgemm = gops(l.ops(), ms);
#endif
}

// "-" where there is no figure (no OpenBLAS).
std::string rate(double v) {
  if (!(v > 0)) return "-";
  char s[32];
  std::snprintf(s, sizeof s, "%.1f", v);
  return s;
}
std::string ratio(double a, double b) {
  if (!(a > 0 && b > 0)) return "-";
  char s[32];
  std::snprintf(s, sizeof s, "%.2f", a / b);
  return s;
}

}  // namespace

int main() {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> csv(nullptr, std::fclose);
  if (const char* path = std::getenv("CPU_CONV_CSV"); path && *path) {
    csv.reset(std::fopen(path, "w"));
    if (!csv) {
      std::fprintf(stderr, "CPU_CONV_CSV: cannot write %s\n", path);
      return 1;
    }
    std::fprintf(csv.get(), "layer,direction,c,k,hw,rs,pad,stride,batch,flex16_gops,f32_gops\n");
  }
  std::vector<Layer> all;
  try {
    all = pick_layers(layers(), std::getenv("CPU_CONV_LAYERS"), "CPU_CONV_LAYERS");
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  std::vector<Rates> rates(all.size());
  unsigned seed = 1;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const Layer& l = all[i];
    ConvParams params;
    params.padding = {l.pad};
    params.stride = {l.stride};
    const ConvPlan plan({l.c, l.hw, l.hw, kBatch}, {l.c, l.rs, l.rs, l.k}, params);
    for (int d = 0; d < kDirs; ++d) {
      std::fprintf(stderr, "%-30s %-6s", l.name.c_str(), kDirNames[d]);
      rates[i].flex16[d] = time_conv(l, plan, static_cast<Dir>(d), DType::flex16, seed += 10);
      rates[i].f32[d] = time_conv(l, plan, static_cast<Dir>(d), DType::f32, seed += 10);
      std::fprintf(stderr, "  flex16 %7.1f  f32 %7.1f GOP/s\n", rates[i].flex16[d],
                   rates[i].f32[d]);
      if (csv)
        std::fprintf(csv.get(), "%s,%s,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%.2f,%.2f\n",
                     l.name.c_str(), kDirNames[d], (long long)l.c, (long long)l.k, (long long)l.hw,
                     (long long)l.rs, (long long)l.pad, (long long)l.stride, (long long)kBatch,
                     rates[i].flex16[d], rates[i].f32[d]);
    }
    time_gemms(l, rates[i], seed += 10);
    std::fprintf(stderr, "%-30s same-K GEMM flex16 %.1f, f32 %.1f, OpenBLAS SGEMM %s GOP/s\n",
                 l.name.c_str(), rates[i].gemm_flex16, rates[i].gemm_f32,
                 rate(rates[i].sgemm).c_str());
  }

  std::printf(
      "\nConvolution on the CPU (%u hardware threads): GOP/s counting 2*N*K*C*R*S*P*Q, N = %lld, "
      "median of %d calls after warm-up; same-K GEMM = dot K x (C*R*S) x (P*Q*N) in the same "
      "process\n\n",
      std::thread::hardware_concurrency(), (long long)kBatch, kTimedCalls);
  std::printf(
      "| layer | direction | flex16 | f32 | same-K GEMM flex16 | f32 | OpenBLAS SGEMM | flex16 / "
      "GEMM | f32 / GEMM | flex16 / SGEMM |\n|---|---|---|---|---|---|---|---|---|---|\n");
  for (std::size_t i = 0; i < all.size(); ++i) {
    const Rates& r = rates[i];
    for (int d = 0; d < kDirs; ++d)
      std::printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", all[i].name.c_str(),
                  kDirNames[d], rate(r.flex16[d]).c_str(), rate(r.f32[d]).c_str(),
                  rate(r.gemm_flex16).c_str(), rate(r.gemm_f32).c_str(), rate(r.sgemm).c_str(),
                  ratio(r.flex16[d], r.gemm_flex16).c_str(), ratio(r.f32[d], r.gemm_f32).c_str(),
                  ratio(r.flex16[d], r.sgemm).c_str());
  }
  return 0;
}
