// Exact flex16 convolution on the GPU, judged by the project's target ratios, measured in the same
// process: ConvPlan fprop / bprop / update, flex16 × flex16 → flex16 at a fixed output iwl, on
// the headline layer (3x3, C = K = 128, 56x56) and the ResNet-50 3x3 and 1x1 layers, batch 64,
// stride 1. Every direction does 2·N·K·C·R·S·P·Q operations; rates count exactly that.
//
// Beside each layer:
//   - the "same K" GEMM: flexkit::dot flex16 × flex16 → flex16 with M = K_out, N = P·Q·N_batch,
//     K = C·R·S (A row-major K × CRS, B row-major CRS × PQN), the rate a lowered convolution
//     would reach; the 3x3 target is conv / GEMM ≥ 0.90 for C ≥ 128.
//   - for 1x1 layers, the effective bandwidth (input + filter + output, 2 bytes each, over the
//     time) against the device-to-device copy rate C measured here (cudaMemcpyAsync of 1 GiB,
//     bytes read + written); the target is ≥ 0.80 of C where the layer is bandwidth-bound. The
//     "bound" column says which roof is lower at the rates measured in this run: the bytes at C,
//     or the operations at the rate of a square flex16 GEMM (8192³, measured here too).
//
// Before a direction is timed it runs once into a poisoned output and 64 sampled outputs (the 16
// corners of its four axes, so padding edges are covered, and 48 random ones) are compared bit
// for bit with a host int64 reference finished by the library's portable epilogue (docs/flex16.md).
// A failing direction is not timed.
//
// Timing: CUDA events around batches of whole calls, median of ≥ 10 batches after warm-up.
// Integer convolutions and products return with their statistics still on the way (an output's
// record is waited for only when read), so back-to-back calls queue like a training loop's.
//
// Environment:
//   CONV_LAYERS        comma-separated layer names as printed (case and spaces ignored, e.g.
//                      "3x3C128K128 56x56"), "3x3", "1x1" or "all" (the default)
//   CONV_TIME_LIMIT_S  no new measurement starts after this many seconds (default 240); the rest
//                      is printed as skip
//   CONV_CSV           also write one line per measurement to this file:
//                      layer,direction,flexkit_tflops,ms,ratio_name,ratio
// Progress goes to stderr; the Markdown tables (lines starting with '|') go to stdout.
// Exit status 1 when a check fails or a kernel throws; skipped cases do not count as failures.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "cuda_bench_support.hpp"
#include "flexkit/conv.hpp"
#include "flexkit/flexkit.hpp"
#include "flexkit/gemm.hpp"
#include "flexkit/portable/gemm_epilogue.hpp"

using namespace flexkit;
using namespace flexkit::bench;

namespace {

using i64 = std::int64_t;

// ---- random mantissas ------------------------------------------------------------------------

// Uniform over the whole int16 range [-32768, 32767].
std::vector<std::int16_t> random_mantissas(i64 n, std::uint64_t seed) {
  std::vector<std::int16_t> v(static_cast<std::size_t>(n));
  SplitMix rng{seed};
  for (auto& x : v) x = static_cast<std::int16_t>(static_cast<std::uint16_t>(rng.next() >> 48));
  return v;
}

// A sum of `terms` products of independent mantissas uniform in [-1, 1) (iwl 0 operands) has
// std sqrt(terms) / 3; an output range of six of those holds practically every entry, so the
// fixed iwl neither saturates nor wastes precision.
int output_iwl(i64 terms) {
  const double sigma = std::sqrt(static_cast<double>(terms)) / 3.0;
  return static_cast<int>(std::ceil(std::log2(6.0 * sigma)));
}

// ---- timing ---------------------------------------------------------------------------------

// ≥ 10 repeats of a slower call would take a large share of the time budget by themselves.
constexpr double kMaxCallMs = 2000;

// ---- layers ---------------------------------------------------------------------------------

constexpr i64 kBatch = 64;

struct Layer {
  std::string name;
  i64 c, k;  // input and output channels
  i64 hw;    // input height = width
  i64 rs;    // filter height = width
  i64 pad;
  i64 pq() const { return hw + 2 * pad - rs + 1; }  // output height = width (stride 1)
  bool pointwise() const { return rs == 1; }
  double flops() const {
    return 2.0 * static_cast<double>(kBatch * k * c * rs * rs) * static_cast<double>(pq() * pq());
  }
  // Input, filter and output (each direction moves the same three tensors), 2 bytes an element.
  double bytes() const {
    return 2.0 *
           static_cast<double>(c * hw * hw * kBatch + c * rs * rs * k + k * pq() * pq() * kBatch);
  }
};

std::vector<Layer> all_layers() {
  std::vector<Layer> v;
  v.push_back({"3x3 C128 K128 56x56", 128, 128, 56, 3, 1});
  const std::pair<i64, i64> resnet3[] = {{64, 56}, {128, 28}, {256, 14}, {512, 7}};
  for (const auto& [c, hw] : resnet3)
    v.push_back(
        {fmt("3x3 C%lld K%lld %lldx%lld", (long long)c, (long long)c, (long long)hw, (long long)hw),
         c, c, hw, 3, 1});
  const std::array<i64, 3> resnet1[] = {{64, 256, 56},  {256, 64, 56},   {128, 512, 28},
                                        {512, 128, 28}, {256, 1024, 14}, {1024, 256, 14},
                                        {512, 2048, 7}, {2048, 512, 7}};
  for (const auto& [c, k, hw] : resnet1)
    v.push_back(
        {fmt("1x1 C%lld K%lld %lldx%lld", (long long)c, (long long)k, (long long)hw, (long long)hw),
         c, k, hw, 1, 0});
  return v;
}

// ---- host references ------------------------------------------------------------------------

enum Dir { kFprop, kBprop, kUpdate, kDirs };
constexpr const char* kDirNames[kDirs] = {"fprop", "bprop", "update"};

// The mantissas on the host, in the device layouts: I (C, H, W, N), F (C, R, S, K),
// E (K, P, Q, N) (the output gradient that bprop and update read).
struct Host {
  std::vector<std::int16_t> in, flt, grad;
};

using Point = std::array<i64, 4>;

// The exact accumulator of one output of `dir` at index `at` of its output layout: fprop
// O (K, P, Q, N), bprop ∂I (C, H, W, N), update ∂F (C, R, S, K). Stride and dilation 1.
i64 reference_acc(Dir dir, const Layer& l, const Host& h, const Point& at) {
  const i64 C = l.c, K = l.k, H = l.hw, R = l.rs, P = l.pq(), N = kBatch, pad = l.pad;
  auto I = [&](i64 c, i64 y, i64 x, i64 n) -> i64 {
    return h.in[static_cast<std::size_t>(((c * H + y) * H + x) * N + n)];
  };
  auto F = [&](i64 c, i64 r, i64 s, i64 k) -> i64 {
    return h.flt[static_cast<std::size_t>(((c * R + r) * R + s) * K + k)];
  };
  auto E = [&](i64 k, i64 p, i64 q, i64 n) -> i64 {
    return h.grad[static_cast<std::size_t>(((k * P + p) * P + q) * N + n)];
  };
  auto inside = [](i64 v, i64 extent) { return v >= 0 && v < extent; };
  i64 acc = 0;
  if (dir == kFprop) {  // O[k, p, q, n] = Σ_{c,r,s} I[c, p−pad+r, q−pad+s, n] · F[c, r, s, k]
    const auto [k, p, q, n] = at;
    for (i64 c = 0; c < C; ++c)
      for (i64 r = 0; r < R; ++r)
        for (i64 s = 0; s < R; ++s) {
          const i64 y = p - pad + r, x = q - pad + s;
          if (inside(y, H) && inside(x, H)) acc += I(c, y, x, n) * F(c, r, s, k);
        }
  } else if (dir ==
             kBprop) {  // ∂I[c, y, x, n] = Σ_{k,r,s} F[c, r, s, k] · E[k, y+pad−r, x+pad−s, n]
    const auto [c, y, x, n] = at;
    for (i64 k = 0; k < K; ++k)
      for (i64 r = 0; r < R; ++r)
        for (i64 s = 0; s < R; ++s) {
          const i64 p = y + pad - r, q = x + pad - s;
          if (inside(p, P) && inside(q, P)) acc += F(c, r, s, k) * E(k, p, q, n);
        }
  } else {  // ∂F[c, r, s, k] = Σ_{p,q,n} I[c, p−pad+r, q−pad+s, n] · E[k, p, q, n]
    const auto [c, r, s, k] = at;
    for (i64 p = 0; p < P; ++p)
      for (i64 q = 0; q < P; ++q) {
        const i64 y = p - pad + r, x = q - pad + s;
        if (!inside(y, H) || !inside(x, H)) continue;
        for (i64 n = 0; n < N; ++n) acc += I(c, y, x, n) * E(k, p, q, n);
      }
  }
  return acc;
}

// The 16 corners of a 4-axis output (the padding edges of both spatial axes, the first and last
// channel and batch entry) and 48 random entries.
std::vector<Point> sample_points(const Shape& shape, std::uint64_t seed) {
  std::vector<Point> p;
  for (int corner = 0; corner < 16; ++corner) {
    Point pt;
    for (int axis = 0; axis < 4; ++axis)
      pt[static_cast<std::size_t>(axis)] =
          (corner >> axis) & 1 ? shape[static_cast<std::size_t>(axis)] - 1 : 0;
    p.push_back(pt);
  }
  SplitMix rng{seed};
  for (int i = 0; i < 48; ++i) {
    Point pt;
    for (int axis = 0; axis < 4; ++axis)
      pt[static_cast<std::size_t>(axis)] = static_cast<i64>(
          rng.next() % static_cast<std::uint64_t>(shape[static_cast<std::size_t>(axis)]));
    p.push_back(pt);
  }
  return p;
}

struct CheckResult {
  bool ok = true;
  std::string note;
};

// Sampled flex16 outputs against acc rounded by the library's own integer epilogue:
// m = sat16(RNE(acc · 2^−(15 + out_iwl − iwl_x − iwl_y))).
CheckResult check_sampled(const Array& out, int want_iwl, int iwl_x, int iwl_y,
                          const std::vector<Point>& points,
                          const std::function<i64(const Point&)>& acc_at) {
  if (out.iwl() != want_iwl)
    return {false, fmt("out.iwl() is %d, asked for %d", out.iwl(), want_iwl)};
  const auto got = out.to_vector<std::int16_t>();
  const Shape& s = out.shape();
  const int scale = 15 + want_iwl - (iwl_x + iwl_y);
  i64 bad = 0, saturated = 0;
  std::string first;
  for (const Point& pt : points) {
    const i64 acc = acc_at(pt);
    const portable::Flex16Code want = portable::gemm_round_shift(acc, scale);
    saturated += want.saturated;
    i64 at = 0;
    for (std::size_t axis = 0; axis < s.size(); ++axis) at = at * s[axis] + pt[axis];
    const std::int16_t g = got[static_cast<std::size_t>(at)];
    if (g != want.m && bad++ == 0)
      first = fmt("(%lld, %lld, %lld, %lld) got m=%d want %d (acc %lld)", (long long)pt[0],
                  (long long)pt[1], (long long)pt[2], (long long)pt[3], g, want.m, (long long)acc);
  }
  if (bad)
    return {
        false,
        fmt("%lld of %zu sampled outputs differ; first ", (long long)bad, points.size()) + first};
  return {true, fmt("%zu sampled outputs bit-exact%s", points.size(),
                    saturated ? fmt(", %lld saturated", (long long)saturated).c_str() : "")};
}

// ---- measurements ---------------------------------------------------------------------------

struct Cell {
  double tops = std::numeric_limits<double>::quiet_NaN();
  double ms = std::numeric_limits<double>::quiet_NaN();
  std::string text;   // shown instead of the rate: "skip", "err", "FAIL"
  std::string guard;  // PASS / FAIL: … / skip / err
};

bool valid(const Cell& c) {
  return c.text.empty() && std::isfinite(c.tops);
}

struct Row {
  Layer layer;
  Cell conv[kDirs];
  Cell gemm;
};

int g_failures = 0;
double g_time_limit = 240;

// Past CONV_TIME_LIMIT_S: marks the cell skipped (before any data is prepared for it).
bool past_limit(Cell& cell, const std::string& what) {
  if (elapsed_s() <= g_time_limit) return false;
  cell.text = cell.guard = "skip";
  progress("%-40s skipped: the bench has run %.0f s (CONV_TIME_LIMIT_S=%.0f)", what.c_str(),
           elapsed_s(), g_time_limit);
  return true;
}

// Runs `body` once into a poisoned output and checks it, then times it. The poison (mantissa −1
// everywhere) means an unwritten output cannot pass.
void measure(Cell& cell, const std::string& what, double flops, const Array& out,
             const std::function<void()>& body, const std::function<CheckResult()>& check) {
  if (past_limit(cell, what)) return;
  try {
    CUDA_CHECK(cudaMemsetAsync(out.data(), 0xff, out.nbytes(), stream()));
    body();
    CUDA_CHECK(cudaStreamSynchronize(stream()));
    CUDA_CHECK(cudaGetLastError());
    const CheckResult c = check();
    progress("%-40s guard %s: %s", what.c_str(), c.ok ? "PASS" : "FAIL", c.note.c_str());
    if (!c.ok) {
      cell.text = "FAIL";
      cell.guard = "FAIL: " + c.note;
      ++g_failures;
      return;
    }
    cell.guard = "PASS";
    const Timing t = time_kernel(body, kMaxCallMs);
    cell.ms = t.ms;
    cell.tops = flops / (t.ms * 1e9);
    progress("%-40s %9.3f ms %8.2f TOP/s  (median of %d x %d calls)", what.c_str(), t.ms, cell.tops,
             t.repeats, t.batch);
  } catch (const Skipped& e) {
    cell.text = "skip";
    if (cell.guard.empty()) cell.guard = "skip";
    progress("%-40s skipped: %s", what.c_str(), e.what());
  } catch (const std::exception& e) {
    cell.text = "err";
    if (cell.guard.empty()) cell.guard = "err";
    ++g_failures;
    progress("%-40s FAILED: %s", what.c_str(), e.what());
    cudaGetLastError();  // clear a non-sticky error so that the next measurement can run
  }
}

const Device kGpu = Device::cuda(0);

Array device_flex16(const std::vector<std::int16_t>& mantissas, const Shape& shape) {
  return Array::from_flex16(std::span<const std::int16_t>(mantissas), 0, shape, kGpu);
}

void run_conv(const Layer& l, Row& row, std::uint64_t seed) {
  if (elapsed_s() > g_time_limit) {
    for (int d = 0; d < kDirs; ++d) past_limit(row.conv[d], l.name + " " + kDirNames[d]);
    return;
  }
  const i64 C = l.c, K = l.k, H = l.hw, R = l.rs, P = l.pq(), N = kBatch;
  progress("%s: preparing data", l.name.c_str());
  Host h;
  h.in = random_mantissas(C * H * H * N, seed + 1);
  h.flt = random_mantissas(C * R * R * K, seed + 2);
  h.grad = random_mantissas(K * P * P * N, seed + 3);
  const Shape in_shape{C, H, H, N}, flt_shape{C, R, R, K}, out_shape{K, P, P, N};
  const Array x = device_flex16(h.in, in_shape);
  const Array f = device_flex16(h.flt, flt_shape);
  const Array e = device_flex16(h.grad, out_shape);
  const Array outs[kDirs] = {Array::empty(out_shape, DType::flex16, kGpu),
                             Array::empty(in_shape, DType::flex16, kGpu),
                             Array::empty(flt_shape, DType::flex16, kGpu)};
  ConvParams params;
  params.padding = {l.pad};
  const ConvPlan plan(in_shape, flt_shape, params);
  // Terms in each direction's sums: C·R·S, K·R·S, N·P·Q.
  const i64 terms[kDirs] = {C * R * R, K * R * R, N * P * P};
  for (int d = 0; d < kDirs; ++d) {
    const Dir dir = static_cast<Dir>(d);
    const Array& out = outs[d];
    ConvOptions o;
    o.iwl_policy = IwlPolicy::fixed;
    o.iwl = output_iwl(terms[d]);
    const std::function<void()> body = [&] {
      switch (dir) {
        case kFprop:
          plan.fprop(x, f, out, o);
          break;
        case kBprop:
          plan.bprop(f, e, out, o);
          break;
        default:
          plan.update(x, e, out, o);
          break;
      }
    };
    const int iwl_x = dir == kBprop ? f.iwl() : x.iwl();
    const int iwl_y = dir == kFprop ? f.iwl() : e.iwl();
    measure(row.conv[d], l.name + " " + kDirNames[d], l.flops(), out, body, [&] {
      return check_sampled(out, *o.iwl, iwl_x, iwl_y, sample_points(out.shape(), seed + 10 + d),
                           [&](const Point& p) { return reference_acc(dir, l, h, p); });
    });
  }
}

// flexkit::dot flex16 × flex16 → flex16, m × depth times depth × n (A and B row-major), checked
// and timed into `cell`.
void run_dot(Cell& cell, const std::string& what, i64 m, i64 depth, i64 n, std::uint64_t seed) {
  if (past_limit(cell, what)) return;
  const auto ha = random_mantissas(m * depth, seed + 4);
  const auto hb = random_mantissas(depth * n, seed + 5);
  const Array a = device_flex16(ha, {m, depth});
  const Array b = device_flex16(hb, {depth, n});
  const Array out = Array::empty({m, n}, DType::flex16, kGpu);
  DotOptions o;
  o.iwl_policy = IwlPolicy::fixed;
  o.iwl = output_iwl(depth);
  measure(
      cell, what,
      2.0 * static_cast<double>(m) * static_cast<double>(depth) * static_cast<double>(n), out,
      [&] { dot(a, b, out, o); },
      [&] {
        // The output (m, n) seen as (m, 1, 1, n), for the shared sampler and checker.
        return check_sampled(out.reshape({m, 1, 1, n}), *o.iwl, a.iwl(), b.iwl(),
                             sample_points({m, 1, 1, n}, seed + 20), [&](const Point& p) {
                               i64 acc = 0;
                               for (i64 t = 0; t < depth; ++t)
                                 acc += i64{ha[static_cast<std::size_t>(p[0] * depth + t)]} *
                                        hb[static_cast<std::size_t>(t * n + p[3])];
                               return acc;
                             });
      });
}

// The GEMM a lowered convolution would run: K_out × (C·R·S) times (C·R·S) × (P·Q·N).
void run_gemm(const Layer& l, Row& row, std::uint64_t seed) {
  run_dot(row.gemm, l.name + " GEMM", l.k, l.c * l.rs * l.rs, l.pq() * l.pq() * kBatch, seed);
}

// ---- the ceilings ---------------------------------------------------------------------------

// A ceiling's cell from `body`; a failure outside a measurement's own checks (an allocation, an
// upload) marks it "err" and counts.
template <typename Body>
Cell ceiling(const char* what, Body&& body) {
  Cell cell;
  try {
    body(cell);
  } catch (const std::exception& e) {
    cell.text = "err";
    ++g_failures;
    progress("%s FAILED: %s", what, e.what());
    cudaGetLastError();
  }
  return cell;
}

// The exact product's rate where the tensor cores, not the operands' depth, set it: a square
// 8192³ flex16 GEMM, the compute roof the "bound" column weighs a 1x1 layer's bytes against.
Cell gemm_roof() {
  return ceiling("GEMM roof", [](Cell& cell) {
    run_dot(cell, "flex16 GEMM 8192 x 8192 x 8192 (roof)", 8192, 8192, 8192, 77);
  });
}

// Device-to-device copy of 1 GiB (far beyond L2), bytes read + written per second; the cell's
// rate field holds GB/s here.
Cell copy_rate() {
  return ceiling("copy rate", [](Cell& cell) {
    const std::size_t bytes = std::size_t{1} << 30;
    const Array src = Array::empty({static_cast<i64>(bytes)}, DType::u8, kGpu);
    const Array dst = Array::empty({static_cast<i64>(bytes)}, DType::u8, kGpu);
    CUDA_CHECK(cudaMemsetAsync(src.data(), 0x5a, bytes, stream()));
    const Timing t = time_kernel(
        [&] {
          CUDA_CHECK(
              cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, stream()));
        },
        kMaxCallMs);
    cell.ms = t.ms;
    cell.tops = 2.0 * static_cast<double>(bytes) / (t.ms * 1e6);  // GB/s
    progress("%-40s %9.3f ms %8.1f GB/s", "copy 1 GiB device-to-device (= C)", t.ms, cell.tops);
  });
}

// ---- output ---------------------------------------------------------------------------------

std::string num(double v, const char* format) {
  return std::isfinite(v) ? fmt(format, v) : std::string("-");
}

std::string rate(const Cell& c) {
  return c.text.empty() ? num(c.tops, "%.1f") : c.text;
}

// conv / GEMM at the same operation count.
double gemm_ratio(const Row& r, Dir d) {
  return valid(r.conv[d]) && valid(r.gemm) ? r.conv[d].tops / r.gemm.tops
                                           : std::numeric_limits<double>::quiet_NaN();
}

double bandwidth_gbs(const Row& r, Dir d) {
  return valid(r.conv[d]) ? r.layer.bytes() / (r.conv[d].ms * 1e6)
                          : std::numeric_limits<double>::quiet_NaN();
}

double copy_ratio(const Row& r, Dir d, const Cell& copy) {
  return valid(copy) ? bandwidth_gbs(r, d) / copy.tops : std::numeric_limits<double>::quiet_NaN();
}

// The ratio each layer is judged by: 3x3 against the GEMM, 1x1 against the copy rate.
const char* ratio_name(const Layer& l) {
  return l.pointwise() ? "conv/copy" : "conv/gemm";
}

double judged_ratio(const Row& r, Dir d, const Cell& copy) {
  return r.layer.pointwise() ? copy_ratio(r, d, copy) : gemm_ratio(r, d);
}

// The targets: ≥ 0.90 of the GEMM for 3x3 with C ≥ 128, ≥ 0.80 of C for 1x1; 0 = no target.
double goal(const Layer& l) {
  return l.pointwise() ? 0.80 : l.c >= 128 ? 0.90 : 0.0;
}

// Which roof is lower for a 1x1 layer at this run's rates: moving its bytes at C, or its
// operations at the square GEMM's rate (the same-K GEMM is no roof: at a depth of 64 to 256 it
// runs far below the tensor cores' rate, and made every 1x1 layer look compute-bound).
std::string bound(const Row& r, const Cell& copy, const Cell& roof) {
  if (!r.layer.pointwise()) return "-";
  if (!valid(copy) || !valid(roof)) return "?";
  const double memory_ms = r.layer.bytes() / (copy.tops * 1e6);
  const double compute_ms = r.layer.flops() / (roof.tops * 1e9);
  return memory_ms >= compute_ms ? "memory" : "compute";
}

void write_csv(std::FILE* csv, const Row& r, const Cell& copy) {
  if (!csv) return;
  auto line = [&](const char* direction, const Cell& c, const char* name, double ratio) {
    std::fprintf(csv, "%s,%s,%s,%s,%s,%s\n", r.layer.name.c_str(), direction,
                 c.text.empty() ? num(c.tops, "%.3f").c_str() : c.text.c_str(),
                 num(c.ms, "%.4f").c_str(), name, num(ratio, "%.4f").c_str());
  };
  for (int d = 0; d < kDirs; ++d)
    line(kDirNames[d], r.conv[d], ratio_name(r.layer), judged_ratio(r, static_cast<Dir>(d), copy));
  line("gemm", r.gemm, "", std::numeric_limits<double>::quiet_NaN());
  std::fflush(csv);
}

void print_tables(const std::vector<Row>& rows, const Cell& copy, const Cell& roof) {
  std::printf(
      "\n| check (64 sampled outputs, bit-exact vs host int64 reference) | fprop | bprop | "
      "update | same-K GEMM |\n");
  std::printf("|---|---|---|---|---|\n");
  for (const Row& r : rows)
    std::printf("| %s | %s | %s | %s | %s |\n", r.layer.name.c_str(), r.conv[kFprop].guard.c_str(),
                r.conv[kBprop].guard.c_str(), r.conv[kUpdate].guard.c_str(), r.gemm.guard.c_str());

  std::printf("\nCopy rate C (1 GiB device-to-device, read + written): %s GB/s\n",
              valid(copy) ? fmt("%.0f", copy.tops).c_str() : copy.text.c_str());
  std::printf("flex16 GEMM roof (8192 x 8192 x 8192, flex16 out): %s TOP/s\n",
              valid(roof) ? fmt("%.1f", roof.tops).c_str() : roof.text.c_str());
  for (int d = 0; d < kDirs; ++d) {
    const Dir dir = static_cast<Dir>(d);
    std::printf(
        "\n%s: TFLOP/s counting 2*N*K*C*R*S*P*Q, N = %lld, stride 1 (median of >= 10 timed "
        "repeats, CUDA events); same-K GEMM = flex16 dot K x (C*R*S) x (P*Q*N); GB/s = (input + "
        "filter + output) * 2 bytes / time\n\n",
        kDirNames[d], (long long)kBatch);
    std::printf(
        "| layer | flexkit flex16 TFLOP/s | ms | same-K GEMM TOP/s | conv/GEMM | GB/s | conv/copy "
        "| bound | target | met |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
    for (const Row& r : rows) {
      const Cell& c = r.conv[d];
      const Layer& l = r.layer;
      const double g = goal(l), judged = judged_ratio(r, dir, copy);
      const std::string target = g > 0 ? fmt("%s >= %.2f", ratio_name(l), g) : "-";
      const std::string met = g > 0 && std::isfinite(judged) ? (judged >= g ? "yes" : "NO") : "-";
      std::printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", l.name.c_str(),
                  rate(c).c_str(), c.text.empty() ? num(c.ms, "%.4f").c_str() : "-",
                  rate(r.gemm).c_str(), num(gemm_ratio(r, dir), "%.3f").c_str(),
                  l.pointwise() ? num(bandwidth_gbs(r, dir), "%.0f").c_str() : "-",
                  l.pointwise() ? num(copy_ratio(r, dir, copy), "%.3f").c_str() : "-",
                  bound(r, copy, roof).c_str(), target.c_str(), met.c_str());
    }
  }
  std::printf(
      "\nbound (1x1 only): the lower roof at this run's rates, bytes at C or operations at the "
      "flex16 GEMM roof; the copy target is meant for memory-bound layers.\n");
}

int run() {
  if (cuda::device_count() == 0) {
    std::fprintf(stderr, "bench_conv: no CUDA device\n");
    return 1;
  }
  const std::vector<Layer> layers =
      pick_layers(all_layers(), std::getenv("CONV_LAYERS"), "CONV_LAYERS");
  if (const char* limit = std::getenv("CONV_TIME_LIMIT_S")) g_time_limit = std::atof(limit);
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> csv(nullptr, std::fclose);
  if (const char* path = std::getenv("CONV_CSV"); path && *path) {
    csv.reset(std::fopen(path, "w"));
    if (!csv) throw std::runtime_error(std::string("CONV_CSV: cannot write ") + path);
    std::fprintf(csv.get(), "layer,direction,flexkit_tflops,ms,ratio_name,ratio\n");
  }

  const cuda::DeviceInfo info = cuda::device_info(0);
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M", std::localtime(&now));
  std::printf("\nExact flex16 convolution, %s, %s (%d SMs, %.0f GiB)\n", date, info.name.c_str(),
              info.multiprocessors, static_cast<double>(info.total_memory) / (1 << 30));
  std::fflush(stdout);

  const Cell copy = copy_rate();
  cuda::empty_cache();
  const Cell roof = gemm_roof();
  cuda::empty_cache();

  std::vector<Row> rows;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    Row row;
    row.layer = layers[i];
    const std::uint64_t seed = 1000 * (i + 1);
    try {
      run_conv(row.layer, row, seed);
      cuda::empty_cache();  // the conv operands, before the GEMM's larger ones
      run_gemm(row.layer, row, seed);
    } catch (const std::exception& e) {
      // Failures outside a measurement (data upload, plan construction).
      ++g_failures;
      progress("%-40s FAILED: %s", row.layer.name.c_str(), e.what());
      for (Cell* c : {&row.conv[0], &row.conv[1], &row.conv[2], &row.gemm})
        if (c->text.empty() && !std::isfinite(c->tops)) c->text = c->guard = "err";
      cudaGetLastError();
    }
    cuda::empty_cache();
    write_csv(csv.get(), row, copy);
    rows.push_back(std::move(row));
  }

  print_tables(rows, copy, roof);
  std::printf("\n%s (%.0f s)\n",
              g_failures ? "bench_conv: FAILURES above" : "bench_conv: all checks passed",
              elapsed_s());
  return g_failures ? 1 : 0;
}

}  // namespace

int main() {
  try {
    return run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_conv: %s\n", e.what());
    return 1;
  }
}
