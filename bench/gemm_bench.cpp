// Exact flex16 GEMM on the GPU beside cuBLAS, measured in the same process:
// flexkit::dot flex16 × flex16 → flex16 and → f32 and flex16 × u8 spikes → flex16, next to
// cuBLAS SGEMM (TF32 off), TF32, BF16 and INT8 (TN, int32 out: cuBLAS's fast integer case), on
// squares 1024..16384, two training shapes and the four transposes at 4096^3. Rates count
// 2·M·N·K. A small bit-exact guard runs first, so the timed kernel is known to be the right one,
// and every timed output is checked afterwards: flex16 bit-exactly against the host integer
// reference (docs/flex16.md), the peers against a float64 / int64 reference on sampled entries.
//
// Environment:
//   GEMM_SIZES         which cases, comma-separated: N (N^3), MxNxK, "train" (256x4096x4096 and
//                      4096x256x4096), "trans" (nn/nt/tn/tt at 4096^3), "all" (the default:
//                      1024,2048,4096,8192,train,trans,16384). Example: GEMM_SIZES=8192,train
//   GEMM_TIME_LIMIT_S  no new case starts after this many seconds (default 150)
// Progress goes to stderr; the Markdown tables (lines starting with '|') go to stdout.
// Exit status 1 when a check fails or a kernel throws; skipped cases do not count as failures.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cuda_bench_support.hpp"
#include "flexkit/flexkit.hpp"
#include "flexkit/gemm.hpp"

using namespace flexkit;
using namespace flexkit::bench;

namespace {

using i64 = std::int64_t;

// ---- cuBLAS status checks (CUDA's are in cuda_bench_support.hpp), so a failure names the call.

void check_cublas(cublasStatus_t status, const char* call, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw std::runtime_error(std::string(call) + " failed: " + cublasGetStatusName(status) + " (" +
                           cublasGetStatusString(status) +
                           ") at gemm_bench.cpp:" + std::to_string(line));
}

#define CUBLAS_CHECK(call) check_cublas((call), #call, __LINE__)

// ---- random data ----------------------------------------------------------------------------

// Uniform in (-1, 1) and never zero: (2x + 1 − 2^24) / 2^24 for 24-bit x is an odd multiple of
// 2^-24, exact in float.
std::vector<float> random_floats(i64 n, std::uint64_t seed) {
  std::vector<float> v(static_cast<std::size_t>(n));
  SplitMix rng{seed};
  for (auto& x : v) {
    const auto bits = static_cast<double>(rng.next() >> 40);
    x = static_cast<float>((2.0 * bits + 1.0 - 16777216.0) / 16777216.0);
  }
  return v;
}

std::vector<std::uint8_t> random_spikes(i64 n, std::uint64_t seed) {
  std::vector<std::uint8_t> v(static_cast<std::size_t>(n));
  SplitMix rng{seed};
  for (auto& x : v) x = static_cast<std::uint8_t>(rng.next() >> 63);
  return v;
}

// Bytes read by cuBLAS as int8 in [-128, 127].
std::vector<std::uint8_t> random_bytes(i64 n, std::uint64_t seed) {
  std::vector<std::uint8_t> v(static_cast<std::size_t>(n));
  SplitMix rng{seed};
  for (auto& x : v) x = static_cast<std::uint8_t>(rng.next() >> 56);
  return v;
}

// rows × cols row-major → cols × rows row-major, in blocks so that big operands stay
// cache-friendly.
template <class T>
std::vector<T> transposed(const std::vector<T>& src, i64 rows, i64 cols) {
  std::vector<T> dst(src.size());
  constexpr i64 kBlock = 64;
  for (i64 r0 = 0; r0 < rows; r0 += kBlock)
    for (i64 c0 = 0; c0 < cols; c0 += kBlock)
      for (i64 r = r0; r < std::min(rows, r0 + kBlock); ++r)
        for (i64 c = c0; c < std::min(cols, c0 + kBlock); ++c)
          dst[static_cast<std::size_t>(c * rows + r)] = src[static_cast<std::size_t>(r * cols + c)];
  return dst;
}

double mean_square(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return s / static_cast<double>(v.size());
}

// ---- timing ---------------------------------------------------------------------------------

constexpr double kMaxCallMs = 3000;  // ≥ 10 repeats of a slower call would blow the time budget

// ---- host references ------------------------------------------------------------------------

// Operands in "dot form" on the host: A as m rows of k, B as n columns of k (B transposed), so
// every reference entry is one contiguous dot product whatever the device layout was.
template <class TB>
i64 int_dot(const std::int16_t* a, const TB* b, i64 k) {
  i64 s = 0;
  for (i64 t = 0; t < k; ++t)
    s += static_cast<std::int32_t>(a[t]) * static_cast<std::int32_t>(b[t]);
  return s;
}

// docs/flex16.md: out.m = sat16(RNE(acc · 2^−scale)). Computed here another way than the library
// does (in double, exact while |acc| < 2^53, then nearbyint in the default round-to-nearest-even
// mode), so a shared mistake is unlikely.
std::int16_t expected_flex16(i64 acc, int scale) {
  const double r = std::nearbyint(std::ldexp(static_cast<double>(acc), -scale));
  return static_cast<std::int16_t>(std::clamp(r, -32768.0, 32767.0));
}

// The f32 output: the exact value acc · 2^(iwl_a + iwl_b − 30) rounded once to float.
float expected_f32(i64 acc, int iwl_a, int iwl_b) {
  return static_cast<float>(std::ldexp(static_cast<double>(acc), iwl_a + iwl_b - 30));
}

using Points = std::vector<std::pair<i64, i64>>;

// Every element (the small guard), or the first row, the last column, the corners and 512
// random entries (timed shapes: a missing edge tile or a wrong tile order shows up there).
Points sample_points(i64 m, i64 n, bool every, bool lines, std::uint64_t seed) {
  Points p;
  if (every) {
    for (i64 i = 0; i < m; ++i)
      for (i64 j = 0; j < n; ++j) p.emplace_back(i, j);
    return p;
  }
  if (lines) {
    for (i64 j = 0; j < n; ++j) p.emplace_back(0, j);
    for (i64 i = 0; i < m; ++i) p.emplace_back(i, n - 1);
  }
  p.emplace_back(0, 0);
  p.emplace_back(m - 1, 0);
  p.emplace_back(0, n - 1);
  p.emplace_back(m - 1, n - 1);
  SplitMix rng{seed};
  for (int s = 0; s < 512; ++s)
    p.emplace_back(static_cast<i64>(rng.next() % static_cast<std::uint64_t>(m)),
                   static_cast<i64>(rng.next() % static_cast<std::uint64_t>(n)));
  return p;
}

struct CheckResult {
  bool ok = true;
  std::string note;
};

// An exact product (flex16 × flex16 or flex16 × u8) checked bit for bit: flex16 outputs against
// the rounded integer accumulator, f32 outputs against its single rounding to float.
template <class TB>
CheckResult check_exact(const Array& out, const std::vector<std::int16_t>& a_rows, int iwl_a,
                        const std::vector<TB>& b_cols, int iwl_b, i64 m, i64 n, i64 k,
                        const Points& points, std::optional<int> want_iwl) {
  std::vector<std::int16_t> got16;
  std::vector<float> got32;
  int scale = 0;
  if (out.dtype() == DType::flex16) {
    if (want_iwl && out.iwl() != *want_iwl)
      return {false, fmt("out.iwl() is %d, asked for %d", out.iwl(), *want_iwl)};
    got16 = out.to_vector<std::int16_t>();
    scale = 15 + out.iwl() - (iwl_a + iwl_b);
  } else {
    got32 = out.to_vector<float>();
    for (float x : got32)
      if (!std::isfinite(x)) return {false, "non-finite f32 output (poison left unwritten?)"};
  }
  if (out.size() != m * n)
    return {false, fmt("output holds %lld elements, expected %lld", (long long)out.size(),
                       (long long)(m * n))};
  i64 bad = 0, saturated = 0;
  std::string first;
  for (const auto& [i, j] : points) {
    const i64 acc = int_dot(&a_rows[static_cast<std::size_t>(i * k)],
                            &b_cols[static_cast<std::size_t>(j * k)], k);
    if (std::abs(acc) >= (i64{1} << 53)) return {false, "reference accumulator beyond 2^53"};
    const std::size_t at = static_cast<std::size_t>(i * n + j);
    bool match;
    std::string detail;
    if (out.dtype() == DType::flex16) {
      const std::int16_t want = expected_flex16(acc, scale);
      saturated += want == 32767 || want == -32768;
      match = got16[at] == want;
      if (!match) detail = fmt("got m=%d want %d (acc %lld)", got16[at], want, (long long)acc);
    } else {
      const float want = expected_f32(acc, iwl_a, iwl_b);
      match = std::memcmp(&got32[at], &want, sizeof want) == 0;
      if (!match) detail = fmt("got %.9g want %.9g", got32[at], want);
    }
    if (!match && bad++ == 0) first = fmt("(%lld, %lld) ", (long long)i, (long long)j) + detail;
  }
  if (bad)
    return {false,
            fmt("%lld of %zu entries differ; first ", (long long)bad, points.size()) + first};
  return {true, fmt("%zu entries bit-exact%s", points.size(),
                    saturated ? fmt(", %lld saturated", (long long)saturated).c_str() : "")};
}

// A float peer against the float64 product of the same (unrounded) inputs on sampled entries;
// the error is measured in units of sqrt(Σ (a·b)²), the natural size of a sum's rounding noise,
// which tells f32 accumulation (~1e-6) from TF32 (~5e-4) and BF16 (~3e-3) inputs.
CheckResult check_float(const std::vector<float>& got, const std::vector<float>& a,
                        const std::vector<float>& b, i64 m, i64 n, i64 k, double tolerance) {
  for (float x : got)
    if (!std::isfinite(x)) return {false, "non-finite output (poison left unwritten?)"};
  double worst = 0;
  for (const auto& [i, j] : sample_points(m, n, false, false, 7)) {
    double sum = 0, sq = 0;
    for (i64 t = 0; t < k; ++t) {
      const double p = static_cast<double>(a[static_cast<std::size_t>(i * k + t)]) *
                       b[static_cast<std::size_t>(t * n + j)];
      sum += p;
      sq += p * p;
    }
    const double err =
        std::abs(got[static_cast<std::size_t>(i * n + j)] - sum) / std::max(std::sqrt(sq), 1e-30);
    worst = std::max(worst, err);
  }
  return {worst <= tolerance,
          fmt("max error %.2e of sqrt(sum (ab)^2) (tolerance %.0e)", worst, tolerance)};
}

// ---- the table ------------------------------------------------------------------------------

enum Col { kFlex16, kFlexF32, kFlexU8, kSgemm, kTf32, kBf16, kInt8, kCols };

struct Cell {
  double tops = std::numeric_limits<double>::quiet_NaN();
  std::string text;  // shown instead of the rate: "skip", "err", "FAIL"
};

struct Row {
  std::string label;
  i64 m = 0, n = 0, k = 0;
  Cell cells[kCols];
  int peer_row = -1;  // transposed rows take their ratios from the square row of the same size
};

int g_failures = 0;

void measure(Row& row, Col col, const char* name, const Array& out,
             const std::function<void()>& body, const std::function<CheckResult()>& check) {
  Cell& cell = row.cells[col];
  const std::string what = row.label + " " + name;
  try {
    // Poison the output (NaN for floats, -1 for integers), so an unwritten tile cannot pass.
    CUDA_CHECK(cudaMemsetAsync(out.data(), 0xff, out.nbytes(), stream()));
    const Timing t = time_kernel(body, kMaxCallMs);
    const double tops = 2.0 * static_cast<double>(row.m) * static_cast<double>(row.n) *
                        static_cast<double>(row.k) / (t.ms * 1e9);
    const CheckResult c = check();
    progress("%-36s %9.3f ms %8.1f TOP/s  (median of %d x %d calls)  check %s: %s", what.c_str(),
             t.ms, tops, t.repeats, t.batch, c.ok ? "ok" : "FAILED", c.note.c_str());
    if (c.ok) {
      cell.tops = tops;
    } else {
      cell.text = "FAIL";
      ++g_failures;
    }
  } catch (const Skipped& e) {
    cell.text = "skip";
    progress("%-36s skipped: %s", what.c_str(), e.what());
  } catch (const std::exception& e) {
    cell.text = "err";
    ++g_failures;
    progress("%-36s FAILED: %s", what.c_str(), e.what());
    cudaGetLastError();  // clear a non-sticky error so that the next measurement can run
  }
}

std::string rate(const Cell& c) {
  return c.text.empty() ? fmt("%.1f", c.tops) : c.text;
}

bool valid(const Cell& c) {
  return c.text.empty() && std::isfinite(c.tops);
}

std::string ratio(const Cell& num, const Cell& den, double den_scale) {
  return valid(num) && valid(den) ? fmt("%.2f", num.tops / (den.tops * den_scale)) : "-";
}

// ---- cuBLAS peers ---------------------------------------------------------------------------

struct Cublas {
  cublasHandle_t h = nullptr;
  Cublas() {
    CUBLAS_CHECK(cublasCreate(&h));
    CUBLAS_CHECK(cublasSetStream(h, stream()));
    // Default math: CUBLAS_COMPUTE_32F then means true fp32, TF32 only where asked for.
    CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
  }
  ~Cublas() {
    if (h) cublasDestroy(h);
  }
  Cublas(const Cublas&) = delete;
  Cublas& operator=(const Cublas&) = delete;
};

int as_int(i64 v) {
  return static_cast<int>(v);
}

// Row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ: the operands swap and no transpose is needed.
void gemm_float(cublasHandle_t h, cudaDataType_t type, cublasComputeType_t compute, const Array& a,
                const Array& b, const Array& c, i64 m, i64 n, i64 k) {
  const float one = 1.0f, zero = 0.0f;
  CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, as_int(n), as_int(m), as_int(k), &one,
                            b.data(), type, as_int(n), a.data(), type, as_int(k), &zero, c.data(),
                            type, as_int(n), compute, CUBLAS_GEMM_DEFAULT));
}

// INT8 in the TN layout (column-major): A stored k × m (op T), B stored k × n (op N), C m × n
// int32. On the host these are A as m rows of k and B as n rows of k.
void gemm_int8(cublasHandle_t h, const Array& a, const Array& b, const Array& c, i64 m, i64 n,
               i64 k) {
  const std::int32_t one = 1, zero = 0;
  CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, as_int(m), as_int(n), as_int(k), &one,
                            a.data(), CUDA_R_8I, as_int(k), b.data(), CUDA_R_8I, as_int(k), &zero,
                            c.data(), CUDA_R_32I, as_int(m), CUBLAS_COMPUTE_32I,
                            CUBLAS_GEMM_DEFAULT));
}

// ---- operands ------------------------------------------------------------------------------

const Device kGpu = Device::cuda(0);

struct Flex16Operand {
  Array view;                        // what dot() gets: (m, k) for A, (k, n) for B
  std::vector<float> values;         // host values in the storage's row-major order
  std::vector<std::int16_t> dotted;  // mantissas in dot form (A: m rows of k; B: n rows of k)
  int iwl = 0;
};

// A (m, k): stored row-major, or (trans) stored as k × m and viewed through T().
Flex16Operand make_a(i64 m, i64 k, bool trans, std::uint64_t seed, Device device = kGpu) {
  Flex16Operand op;
  op.values = random_floats(m * k, seed);
  const Array storage =
      Array::from_floats(op.values, trans ? Shape{k, m} : Shape{m, k}, DType::flex16, device);
  op.view = trans ? storage.T() : storage;
  op.iwl = storage.iwl();
  const auto mant = storage.to_vector<std::int16_t>();
  op.dotted = trans ? transposed(mant, k, m) : mant;
  return op;
}

// B (k, n): stored row-major, or (trans) stored as n × k and viewed through T().
Flex16Operand make_b(i64 k, i64 n, bool trans, std::uint64_t seed, Device device = kGpu) {
  Flex16Operand op;
  op.values = random_floats(k * n, seed);
  const Array storage =
      Array::from_floats(op.values, trans ? Shape{n, k} : Shape{k, n}, DType::flex16, device);
  op.view = trans ? storage.T() : storage;
  op.iwl = storage.iwl();
  const auto mant = storage.to_vector<std::int16_t>();
  op.dotted = trans ? mant : transposed(mant, k, n);
  return op;
}

// Entries of A·B are sums of k independent zero-mean products, std ≈ sqrt(k·E[a²]·E[b²]); an
// output range of six of those holds practically every entry without wasting precision.
int output_iwl(i64 k, double mean_sq_a, double mean_sq_b) {
  const double sigma = std::sqrt(static_cast<double>(k) * mean_sq_a * mean_sq_b);
  return static_cast<int>(std::ceil(std::log2(6.0 * sigma)));
}

DotOptions fixed_iwl(int iwl) {
  DotOptions o;
  o.iwl_policy = IwlPolicy::fixed;
  o.iwl = iwl;
  return o;
}

// ---- the small bit-exact guard ----------------------------------------------------------------

struct GuardLine {
  std::string name;
  std::string result;
};

bool run_guard(std::vector<GuardLine>& lines) {
  const i64 m = 256, n = 192, k = 320;
  bool all = true;
  const Points every = sample_points(m, n, true, false, 0);
  auto run = [&](const std::string& name, const std::function<CheckResult()>& body) {
    CheckResult r;
    try {
      r = body();
    } catch (const std::exception& e) {
      r = {false, std::string("error: ") + e.what()};
      cudaGetLastError();
    }
    all = all && r.ok;
    progress("guard %-34s %s  %s", name.c_str(), r.ok ? "PASS" : "FAIL", r.note.c_str());
    lines.push_back({name, r.ok ? "PASS" : "FAIL: " + r.note});
  };
  // Runs dot once into a poisoned output and waits for it.
  auto once = [&](const Array& a, const Array& b, const Array& out, const DotOptions& o) {
    CUDA_CHECK(cudaMemsetAsync(out.data(), 0xff, out.nbytes(), stream()));
    dot(a, b, out, o);
    CUDA_CHECK(cudaStreamSynchronize(stream()));
    CUDA_CHECK(cudaGetLastError());
  };

  const char* kLayouts[] = {"nn", "nt", "tn", "tt"};
  for (int layout = 0; layout < 4; ++layout) {
    const bool ta = layout >= 2, tb = layout % 2 == 1;
    const Flex16Operand a = make_a(m, k, ta, 11 + layout);
    const Flex16Operand b = make_b(k, n, tb, 21 + layout);
    const int iwl = output_iwl(k, mean_square(a.values), mean_square(b.values));
    Array out = Array::empty({m, n}, DType::flex16, kGpu);
    run(fmt("%s flex16 -> flex16 (iwl %d)", kLayouts[layout], iwl), [&] {
      once(a.view, b.view, out, fixed_iwl(iwl));
      return check_exact(out, a.dotted, a.iwl, b.dotted, b.iwl, m, n, k, every, iwl);
    });
    if (layout != 0) continue;
    // Four bits less range: many entries saturate, and saturation is part of the contract.
    run(fmt("nn flex16 -> flex16 (iwl %d, saturating)", iwl - 4), [&] {
      once(a.view, b.view, out, fixed_iwl(iwl - 4));
      return check_exact(out, a.dotted, a.iwl, b.dotted, b.iwl, m, n, k, every, iwl - 4);
    });
    Array out32 = Array::empty({m, n}, DType::f32, kGpu);
    run("nn flex16 -> f32", [&] {
      once(a.view, b.view, out32, {});
      return check_exact(out32, a.dotted, a.iwl, b.dotted, b.iwl, m, n, k, every, std::nullopt);
    });
    const auto spikes = random_spikes(k * n, 31);
    const Array s = Array::from_vector(spikes, {k, n}, kGpu);
    const auto s_cols = transposed(spikes, k, n);
    const int iwl_u8 = output_iwl(k, mean_square(a.values), 0.5);
    // A u8 operand counts as iwl 15: its value is the byte.
    run(fmt("nn flex16 x u8 -> flex16 (iwl %d)", iwl_u8), [&] {
      once(a.view, s, out, fixed_iwl(iwl_u8));
      return check_exact(out, a.dotted, a.iwl, s_cols, 15, m, n, k, every, iwl_u8);
    });
    run("nn flex16 x u8 -> f32", [&] {
      once(a.view, s, out32, {});
      return check_exact(out32, a.dotted, a.iwl, s_cols, 15, m, n, k, every, std::nullopt);
    });
  }
  return all;
}

// ---- the timed cases ----------------------------------------------------------------------------

struct Case {
  i64 m, n, k;
  std::string layout;  // "" for the plain case with every peer; nn/nt/tn/tt: flex16 only
};

std::string label(const Case& c) {
  std::string s = c.m == c.n && c.n == c.k
                      ? fmt("%lld^3", (long long)c.m)
                      : fmt("%lldx%lldx%lld", (long long)c.m, (long long)c.n, (long long)c.k);
  return c.layout.empty() ? s : s + " " + c.layout;
}

void run_layout_case(const Case& c, Row& row) {
  const bool ta = c.layout[0] == 't', tb = c.layout[1] == 't';
  const Flex16Operand a = make_a(c.m, c.k, ta, 101);
  const Flex16Operand b = make_b(c.k, c.n, tb, 102);
  const int iwl = output_iwl(c.k, mean_square(a.values), mean_square(b.values));
  const DotOptions o = fixed_iwl(iwl);
  const Array out = Array::empty({c.m, c.n}, DType::flex16, kGpu);
  const Points points = sample_points(c.m, c.n, false, true, 5);
  measure(
      row, kFlex16, "flex16 -> flex16", out, [&] { dot(a.view, b.view, out, o); },
      [&] {
        return check_exact(out, a.dotted, a.iwl, b.dotted, b.iwl, c.m, c.n, c.k, points, iwl);
      });
}

void run_case(const Case& c, Row& row, cublasHandle_t h) {
  const i64 m = c.m, n = c.n, k = c.k;
  const Points points = sample_points(m, n, false, true, 5);

  {  // flexkit: flex16 × flex16 → flex16 and → f32, flex16 × u8 → flex16
    const Flex16Operand a = make_a(m, k, false, 201);
    const Flex16Operand b = make_b(k, n, false, 202);
    const int iwl = output_iwl(k, mean_square(a.values), mean_square(b.values));
    const DotOptions o = fixed_iwl(iwl);
    {
      const Array out = Array::empty({m, n}, DType::flex16, kGpu);
      measure(
          row, kFlex16, "flex16 -> flex16", out, [&] { dot(a.view, b.view, out, o); },
          [&] { return check_exact(out, a.dotted, a.iwl, b.dotted, b.iwl, m, n, k, points, iwl); });
    }
    {
      const Array out = Array::empty({m, n}, DType::f32, kGpu);
      measure(
          row, kFlexF32, "flex16 -> f32", out, [&] { dot(a.view, b.view, out); },
          [&] {
            return check_exact(out, a.dotted, a.iwl, b.dotted, b.iwl, m, n, k, points,
                               std::nullopt);
          });
    }
    {
      const auto spikes = random_spikes(k * n, 203);
      const Array s = Array::from_vector(spikes, {k, n}, kGpu);
      const auto s_cols = transposed(spikes, k, n);
      double density = 0;
      for (auto x : spikes) density += x;
      density /= static_cast<double>(spikes.size());
      const int iwl_u8 = output_iwl(k, mean_square(a.values), density);
      const DotOptions ou = fixed_iwl(iwl_u8);
      const Array out = Array::empty({m, n}, DType::flex16, kGpu);
      measure(
          row, kFlexU8, "flex16 x u8 -> flex16", out, [&] { dot(a.view, s, out, ou); },
          [&] { return check_exact(out, a.dotted, a.iwl, s_cols, 15, m, n, k, points, iwl_u8); });
    }
  }

  // Float peers on their own random data: the same distribution, uniform in (-1, 1).
  const auto fa = random_floats(m * k, 301);
  const auto fb = random_floats(k * n, 302);
  if (std::max({m, n, k}) <= 8192) {
    const Array a = Array::from_floats(fa, {m, k}, DType::f32, kGpu);
    const Array b = Array::from_floats(fb, {k, n}, DType::f32, kGpu);
    const Array out = Array::empty({m, n}, DType::f32, kGpu);
    const std::pair<Col, cublasComputeType_t> kinds[] = {{kSgemm, CUBLAS_COMPUTE_32F},
                                                         {kTf32, CUBLAS_COMPUTE_32F_FAST_TF32}};
    for (const auto& [col, compute] : kinds) {
      // f32 accumulation of true f32 products stays near 1e-6 of the noise scale; TF32's
      // 10-bit inputs land near 5e-4.
      const double tolerance = col == kSgemm ? 1e-4 : 1e-2;
      measure(
          row, col, col == kSgemm ? "cuBLAS SGEMM" : "cuBLAS TF32", out,
          [&, compute = compute] { gemm_float(h, CUDA_R_32F, compute, a, b, out, m, n, k); },
          [&] { return check_float(out.to_vector<float>(), fa, fb, m, n, k, tolerance); });
    }
  } else {
    for (Col col : {kSgemm, kTf32}) row.cells[col].text = "skip";
    progress("%-36s SGEMM and TF32 skipped beyond 8192 (no target uses them there)",
             row.label.c_str());
  }
  {
    const Array a = Array::from_floats(fa, {m, k}, DType::bf16, kGpu);
    const Array b = Array::from_floats(fb, {k, n}, DType::bf16, kGpu);
    const Array out = Array::empty({m, n}, DType::bf16, kGpu);
    measure(
        row, kBf16, "cuBLAS BF16 (bf16 out)", out,
        [&] { gemm_float(h, CUDA_R_16BF, CUBLAS_COMPUTE_32F, a, b, out, m, n, k); },
        [&] {
          const auto bits = out.to_vector<BF16>();
          std::vector<float> got(bits.size());
          for (std::size_t i = 0; i < bits.size(); ++i) {
            const std::uint32_t w = std::uint32_t{bits[i].bits} << 16;
            std::memcpy(&got[i], &w, sizeof w);
          }
          // bf16 inputs (8-bit significands) and a bf16 output: a few 1e-3 typically.
          return check_float(got, fa, fb, m, n, k, 5e-2);
        });
  }
  if (m % 4 || n % 4 || k % 4) {
    row.cells[kInt8].text = "skip";
    progress("%-36s INT8 skipped: the TN fast path wants M, N, K multiples of 4",
             row.label.c_str());
    return;
  }
  {
    const auto ha = random_bytes(m * k, 401);  // A: m rows of k (stored k × m column-major)
    const auto hb = random_bytes(n * k, 402);  // B: n rows of k (stored k × n column-major)
    const Array a = Array::from_vector(ha, {m, k}, kGpu);
    const Array b = Array::from_vector(hb, {n, k}, kGpu);
    const Array out = Array::empty({n, m}, DType::i32, kGpu);  // column-major m × n
    measure(
        row, kInt8, "cuBLAS INT8 (TN, i32 out)", out, [&] { gemm_int8(h, a, b, out, m, n, k); },
        [&]() -> CheckResult {
          const auto got = out.to_vector<std::int32_t>();
          for (const auto& [i, j] : sample_points(m, n, false, false, 9)) {
            i64 want = 0;
            for (i64 t = 0; t < k; ++t)
              want += static_cast<std::int8_t>(ha[static_cast<std::size_t>(i * k + t)]) *
                      static_cast<std::int8_t>(hb[static_cast<std::size_t>(j * k + t)]);
            const i64 g = got[static_cast<std::size_t>(j * m + i)];
            if (g != want)
              return {false, fmt("(%lld, %lld) got %lld want %lld", (long long)i, (long long)j,
                                 (long long)g, (long long)want)};
          }
          return {true, "516 sampled entries exact"};
        });
  }
}

// Bytes the largest section of a case holds on the device at once (operands and outputs).
double device_bytes(const Case& c) {
  const double mk = static_cast<double>(c.m * c.k), kn = static_cast<double>(c.k * c.n),
               mn = static_cast<double>(c.m * c.n);
  const double flex = 2 * mk + 2 * kn + kn + 2 * mn + 4 * mn + 2 * mn;
  const double f32 = 4 * (mk + kn + mn);
  return std::max(flex, f32);
}

std::vector<Case> parse_cases(const char* spec) {
  std::string text = spec && *spec ? spec : "all";
  std::replace(text.begin(), text.end(), ' ', ',');
  std::vector<Case> cases;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t end = std::min(text.find(',', pos), text.size());
    const std::string tok = text.substr(pos, end - pos);
    pos = end + 1;
    if (tok.empty()) continue;
    long long m = 0, n = 0, k = 0;
    char tail = 0;
    if (tok == "all") {
      for (i64 s : {1024, 2048, 4096, 8192}) cases.push_back({s, s, s, ""});
      for (const auto& extra : parse_cases("train,trans,16384")) cases.push_back(extra);
    } else if (tok == "train") {
      cases.push_back({256, 4096, 4096, ""});
      cases.push_back({4096, 256, 4096, ""});
    } else if (tok == "trans") {
      for (const char* l : {"nn", "nt", "tn", "tt"}) cases.push_back({4096, 4096, 4096, l});
    } else if (std::sscanf(tok.c_str(), "%lldx%lldx%lld%c", &m, &n, &k, &tail) == 3 && m > 0 &&
               n > 0 && k > 0) {
      cases.push_back({m, n, k, ""});
    } else if (std::sscanf(tok.c_str(), "%lld%c", &m, &tail) == 1 && m > 0) {
      cases.push_back({m, m, m, ""});
    } else {
      throw std::invalid_argument("GEMM_SIZES: cannot read '" + tok +
                                  "' (want N, MxNxK, train, trans or all)");
    }
  }
  return cases;
}

void print_tables(const std::vector<GuardLine>& guard, const std::vector<Row>& rows) {
  std::printf("\n| check (256x192x320, bit-exact vs host int64 reference) | result |\n");
  std::printf("|---|---|\n");
  for (const auto& g : guard) std::printf("| %s | %s |\n", g.name.c_str(), g.result.c_str());

  std::printf(
      "\nTOP/s counting 2*M*N*K (M x N x K; median of >= 10 timed repeats, CUDA events)\n\n");
  std::printf(
      "| shape | flex16 TOP/s | flex16->f32 | flex16 x u8 | SGEMM | TF32 | BF16 | INT8 | "
      "flex16/(INT8/4) | flex16/SGEMM | u8/(INT8/2) |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    const Row& p = r.peer_row >= 0 ? rows[static_cast<std::size_t>(r.peer_row)] : r;
    std::printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.label.c_str(),
                rate(r.cells[kFlex16]).c_str(), rate(r.cells[kFlexF32]).c_str(),
                rate(r.cells[kFlexU8]).c_str(), rate(r.cells[kSgemm]).c_str(),
                rate(r.cells[kTf32]).c_str(), rate(r.cells[kBf16]).c_str(),
                rate(r.cells[kInt8]).c_str(), ratio(r.cells[kFlex16], p.cells[kInt8], 0.25).c_str(),
                ratio(r.cells[kFlex16], p.cells[kSgemm], 1.0).c_str(),
                ratio(r.cells[kFlexU8], p.cells[kInt8], 0.5).c_str());
  }
  std::printf(
      "\nTransposed rows (nn/nt/tn/tt) take their ratios from the square row's peers of the same "
      "run.\n");

  // The project's GEMM targets (bench/RESULTS.md), judged at 8192^3.
  const Row* big = nullptr;
  for (const Row& r : rows)
    if (r.m == 8192 && r.n == 8192 && r.k == 8192 && r.peer_row < 0) big = &r;
  std::printf("\n| target at 8192^3 | value | goal | met |\n|---|---|---|---|\n");
  auto target = [&](const char* name, Col num, Col den, double scale, double goal) {
    if (!big || !valid(big->cells[num]) || !valid(big->cells[den])) {
      std::printf("| %s | not measured | >= %.2f | - |\n", name, goal);
      return;
    }
    const double v = big->cells[num].tops / (big->cells[den].tops * scale);
    std::printf("| %s | %.2f | >= %.2f | %s |\n", name, v, goal, v >= goal ? "yes" : "NO");
  };
  target("flex16 / (cuBLAS INT8 / 4)", kFlex16, kInt8, 0.25, 0.85);
  target("flex16 / cuBLAS SGEMM", kFlex16, kSgemm, 1.0, 5.0);
  target("flex16 x u8 / (cuBLAS INT8 / 2)", kFlexU8, kInt8, 0.5, 0.85);
  if (big && valid(big->cells[kFlex16]))
    std::printf("| flex16 TOP/s (stretch) | %.1f | >= 400 | %s |\n", big->cells[kFlex16].tops,
                big->cells[kFlex16].tops >= 400 ? "yes" : "no");
  else
    std::printf("| flex16 TOP/s (stretch) | not measured | >= 400 | - |\n");
}

int run() {
  if (cuda::device_count() == 0) {
    std::fprintf(stderr, "bench_gemm: no CUDA device\n");
    return 1;
  }
  const std::vector<Case> cases = parse_cases(std::getenv("GEMM_SIZES"));
  const char* limit_env = std::getenv("GEMM_TIME_LIMIT_S");
  const double time_limit = limit_env ? std::atof(limit_env) : 150.0;

  const cuda::DeviceInfo info = cuda::device_info(0);
  Cublas blas;
  int cublas_version = 0;
  CUBLAS_CHECK(cublasGetVersion(blas.h, &cublas_version));
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M", std::localtime(&now));
  std::printf("\nExact flex16 GEMM vs cuBLAS, %s, %s (%d SMs, %.0f GiB), cuBLAS %d\n", date,
              info.name.c_str(), info.multiprocessors,
              static_cast<double>(info.total_memory) / (1 << 30), cublas_version);
  if (const char* tf32 = std::getenv("NVIDIA_TF32_OVERRIDE"))
    std::printf("note: NVIDIA_TF32_OVERRIDE=%s is set\n", tf32);
  std::fflush(stdout);

  std::vector<GuardLine> guard;
  if (!run_guard(guard)) ++g_failures;

  std::vector<Row> rows;
  for (const Case& c : cases) {
    Row row;
    row.label = label(c);
    row.m = c.m;
    row.n = c.n;
    row.k = c.k;
    if (!c.layout.empty())
      for (std::size_t i = 0; i < rows.size(); ++i)
        if (rows[i].m == c.m && rows[i].n == c.n && rows[i].k == c.k && rows[i].peer_row < 0)
          row.peer_row = static_cast<int>(i);
    auto skip_all = [&](const std::string& why) {
      for (Cell& cell : row.cells) cell.text = "skip";
      progress("%-36s skipped: %s", row.label.c_str(), why.c_str());
    };
    if (elapsed_s() > time_limit) {
      skip_all(fmt("the bench has run %.0f s (GEMM_TIME_LIMIT_S=%.0f)", elapsed_s(), time_limit));
    } else if (std::max({c.m, c.n, c.k}) > std::numeric_limits<int>::max() / 2) {
      skip_all("dimensions beyond cuBLAS's int arguments");
    } else {
      try {
        cuda::empty_cache();  // the previous case's blocks, so free memory is really free
        std::size_t free_bytes = 0, total_bytes = 0;
        CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
        const double need = device_bytes(c) * 1.1 + double(1 << 30);  // + workspaces
        if (need > static_cast<double>(free_bytes)) {
          skip_all(fmt("needs about %.1f GiB, %.1f GiB free", need / (1 << 30),
                       static_cast<double>(free_bytes) / (1 << 30)));
        } else {
          progress("%s: preparing data", row.label.c_str());
          if (c.layout.empty())
            run_case(c, row, blas.h);
          else
            run_layout_case(c, row);
        }
      } catch (const std::exception& e) {
        // Failures outside a measurement (data upload, reference readback).
        ++g_failures;
        progress("%-36s FAILED: %s", row.label.c_str(), e.what());
        for (Cell& cell : row.cells)
          if (cell.text.empty() && !std::isfinite(cell.tops)) cell.text = "err";
        cudaGetLastError();
      }
    }
    rows.push_back(std::move(row));
  }

  print_tables(guard, rows);
  std::printf("\n%s (%.0f s)\n",
              g_failures ? "bench_gemm: FAILURES above" : "bench_gemm: all checks passed",
              elapsed_s());
  return g_failures ? 1 : 0;
}

}  // namespace

int main() {
  try {
    return run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gemm: %s\n", e.what());
    return 1;
  }
}
