// The CPU GEMM kernels (backend/cpu/gemm_cpu.cpp) against plain triple loops: exact integer
// products through the portable epilogue for every stride pattern, extreme mantissas and long K,
// f32 against a float64 loop, and the scalar and SIMD paths against each other bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/gemm/gemm_kernels.hpp"
#include "backend/cpu/gemm_cpu.hpp"
#include "flexkit/gemm.hpp"
#include "support/kernel_names.hpp"

namespace {

using flexkit::backend::cpu::make_gemm_cpu_plan;
using flexkit::backend::cpu::gemm_detail::gemm_cpu_with_isa;
using flexkit::backend::cpu::gemm_detail::gemm_hardware_isa;
using flexkit::backend::cpu::gemm_detail::GemmIsa;
using flexkit::gemm::ElementKind;
using flexkit::gemm::EpilogueMode;
using flexkit::gemm::GemmProblem;
namespace portable = flexkit::portable;

const char* isa_name(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::scalar:
      return "scalar";
    case GemmIsa::avx2:
      return "avx2";
    case GemmIsa::avx512:
      return "avx512";
  }
  return "?";
}

// One instance per instruction set. A set this CPU lacks is reported as a skipped test with the
// reason (kernels_for would quietly lower it to one the CPU has, and the test would pass on a
// path it never ran).
class GemmCpuKernelsOnIsa : public ::testing::TestWithParam<GemmIsa> {
 protected:
  void SetUp() override {
    if (GetParam() > gemm_hardware_isa())
      GTEST_SKIP() << "this CPU has no " << isa_name(GetParam()) << " (it runs up to "
                   << isa_name(gemm_hardware_isa()) << ")";
  }
  GemmIsa isa() const { return GetParam(); }
};

// The vector sets only: the scalar set's row rounding is the portable rule itself.
class GemmCpuKernelsOnSimdIsa : public GemmCpuKernelsOnIsa {};

std::string isa_test_name(const ::testing::TestParamInfo<GemmIsa>& info) {
  return isa_name(info.param);
}

// How a (batch, rows, cols) operand is laid out in its storage.
enum class Pattern { row_major, col_major, stepped, reversed, reversed_col_stepped, broadcast };

struct Layout {
  std::int64_t rs = 0, cs = 0, bs = 0;
  std::int64_t offset = 0;  // storage index of element (0, 0, 0)
  std::int64_t size = 0;    // storage elements
  std::int64_t at(std::int64_t b, std::int64_t r, std::int64_t c) const {
    return offset + b * bs + r * rs + c * cs;
  }
};

Layout make_layout(Pattern p, std::int64_t batch, std::int64_t rows, std::int64_t cols) {
  Layout l;
  switch (p) {
    case Pattern::row_major:
      l.cs = 1, l.rs = cols, l.bs = rows * cols;
      break;
    case Pattern::col_major:  // a transposed view
      l.rs = 1, l.cs = rows, l.bs = rows * cols;
      break;
    case Pattern::stepped:  // x[::2, ::3] of a wider array, batches apart
      l.cs = 3, l.rs = 2 * (3 * cols + 1), l.bs = l.rs * rows + 5;
      break;
    case Pattern::reversed:  // x[::-1, ::-1]
      l.cs = -1, l.rs = -cols, l.bs = rows * cols;
      break;
    case Pattern::reversed_col_stepped:  // transposed, both steps non-unit, negative
      l.rs = -2, l.cs = -(2 * rows + 1), l.bs = -((2 * rows + 1) * cols + 3);
      break;
    case Pattern::broadcast:  // one matrix shared by every batch entry
      l.cs = 1, l.rs = cols, l.bs = 0;
      break;
  }
  std::int64_t lo = 0, hi = 0;
  for (auto [s, e] : {std::pair{l.bs, batch}, std::pair{l.rs, rows}, std::pair{l.cs, cols}}) {
    lo += std::min<std::int64_t>(0, s * (e - 1));
    hi += std::max<std::int64_t>(0, s * (e - 1));
  }
  l.offset = -lo;
  l.size = hi - lo + 1;
  return l;
}

portable::GemmEpilogue integer_epilogue(int scale) {
  portable::GemmEpilogue e{};
  e.out_kind = portable::GemmOutKind::flex16;
  e.integer_only = true;
  e.scale = scale;
  e.alpha = 1.0;
  e.beta = 0.0;
  e.acc_unit = 1.0;
  e.old_unit = 1.0;
  e.out_inv_unit = 1.0;
  e.reads_old = false;
  return e;
}

// The double path: r = alpha·acc·acc_unit + beta·old·old_unit.
portable::GemmEpilogue double_epilogue(portable::GemmOutKind out, double alpha, double beta,
                                       int acc_log2, int old_log2, int out_inv_log2) {
  portable::GemmEpilogue e{};
  e.out_kind = out;
  e.integer_only = false;
  e.scale = 0;
  e.alpha = alpha;
  e.beta = beta;
  e.acc_unit = std::ldexp(1.0, acc_log2);
  e.old_unit = out == portable::GemmOutKind::f32 ? 1.0 : std::ldexp(1.0, old_log2);
  e.out_inv_unit = std::ldexp(1.0, out_inv_log2);
  e.reads_old = beta != 0.0;
  return e;
}

struct IntCase {
  std::int64_t batch = 1, m = 1, n = 1, k = 1;
  Pattern pa = Pattern::row_major, pb = Pattern::row_major, pc = Pattern::row_major;
  bool b_u8 = false;
  ElementKind out = ElementKind::flex16;
  portable::GemmEpilogue epilogue = integer_epilogue(15);
  EpilogueMode mode = EpilogueMode::store;
};

// Operands and an output buffer for one integer case, plus what the reference computes.
struct IntRun {
  IntCase c;
  Layout la, lb, lc;
  std::vector<std::int16_t> a;
  std::vector<std::int16_t> b16;
  std::vector<std::uint8_t> b8;
  std::vector<std::int16_t> c16;
  std::vector<float> c32;

  GemmProblem problem() {
    GemmProblem p;
    p.batch = c.batch, p.m = c.m, p.n = c.n, p.k = c.k;
    p.a = {a.data() + la.offset, ElementKind::flex16, la.rs, la.cs, la.bs};
    if (c.b_u8) {
      p.b = {b8.data() + lb.offset, ElementKind::u8, lb.rs, lb.cs, lb.bs};
    } else {
      p.b = {b16.data() + lb.offset, ElementKind::flex16, lb.rs, lb.cs, lb.bs};
    }
    void* out = c.out == ElementKind::flex16 ? static_cast<void*>(c16.data() + lc.offset)
                                             : static_cast<void*>(c32.data() + lc.offset);
    p.c = {out, c.out, lc.rs, lc.cs, lc.bs};
    p.epilogue = c.epilogue;
    p.mode = c.mode;
    return p;
  }

  std::int64_t bval(std::int64_t i) const { return c.b_u8 ? b8[i] : b16[i]; }

  // The triple loop and the portable epilogue, written into (c16, c32) copies; returns the stats.
  portable::GemmStats reference(std::vector<std::int16_t>& out16, std::vector<float>& out32) const {
    out16 = c16;
    out32 = c32;
    portable::GemmStats s = portable::gemm_stats_identity();
    const auto& e = c.epilogue;
    for (std::int64_t bi = 0; bi < c.batch; ++bi)
      for (std::int64_t i = 0; i < c.m; ++i)
        for (std::int64_t j = 0; j < c.n; ++j) {
          std::int64_t acc = 0;
          for (std::int64_t kk = 0; kk < c.k; ++kk)
            acc += std::int64_t{a[la.at(bi, i, kk)]} * bval(lb.at(bi, kk, j));
          const std::int64_t o = lc.at(bi, i, j);
          if (c.out == ElementKind::flex16) {
            const std::int16_t old = e.reads_old ? out16[o] : std::int16_t{0};
            if (c.mode == EpilogueMode::store) {
              auto code = portable::gemm_flex16_result(e, acc, old);
              out16[o] = code.m;
              portable::gemm_stats_store(s, code);
            } else {
              portable::gemm_stats_measure(s, e, acc, old);
            }
          } else if (c.mode == EpilogueMode::store) {
            out32[o] = portable::gemm_f32_result(e, acc, e.reads_old ? out32[o] : 0.0f);
          } else {
            portable::gemm_stats_measure(s, e, acc, 0);
          }
        }
    return s;
  }
};

// Random full-range mantissas with the extremes over-represented.
std::int16_t random_m(std::mt19937& rng) {
  const std::uint32_t r = rng();
  switch (r % 8) {
    case 0:
      return -32768;
    case 1:
      return 32767;
    default:
      return static_cast<std::int16_t>(r >> 16);
  }
}

IntRun make_run(const IntCase& c, unsigned seed) {
  IntRun run;
  run.c = c;
  run.la = make_layout(c.pa, c.batch, c.m, c.k);
  run.lb = make_layout(c.pb, c.batch, c.k, c.n);
  run.lc = make_layout(c.pc, c.batch, c.m, c.n);
  std::mt19937 rng(seed);
  run.a.resize(run.la.size);
  for (auto& x : run.a) x = random_m(rng);
  if (c.b_u8) {
    run.b8.resize(run.lb.size);
    for (auto& x : run.b8) x = static_cast<std::uint8_t>(rng() % 3 == 0 ? 255 : rng());
  } else {
    run.b16.resize(run.lb.size);
    for (auto& x : run.b16) x = random_m(rng);
  }
  // The output storage holds old values (also between the viewed elements, which must survive).
  run.c16.resize(run.lc.size);
  run.c32.resize(run.lc.size);
  for (auto& x : run.c16) x = static_cast<std::int16_t>(rng());
  for (auto& x : run.c32) x = static_cast<float>(static_cast<std::int32_t>(rng() % 2001) - 1000);
  return run;
}

void expect_same_stats(const portable::GemmStats& got, const portable::GemmStats& want) {
  EXPECT_EQ(got.max_abs_m, want.max_abs_m);
  EXPECT_EQ(got.saturated, want.saturated);
  EXPECT_EQ(got.acc_max, want.acc_max);
  EXPECT_EQ(got.acc_min, want.acc_min);
  EXPECT_EQ(got.value_max_key, want.value_max_key);
  EXPECT_EQ(got.value_min_key, want.value_min_key);
}

// Runs the case on one instruction set and compares it with the reference.
void check_int_case(const IntCase& c, unsigned seed, GemmIsa isa) {
  SCOPED_TRACE(::testing::Message()
               << "batch " << c.batch << " m " << c.m << " n " << c.n << " k " << c.k
               << " patterns " << int(c.pa) << int(c.pb) << int(c.pc) << " u8 " << c.b_u8
               << " f32 out " << (c.out == ElementKind::f32) << " measure "
               << (c.mode == EpilogueMode::measure) << " seed " << seed);
  IntRun run = make_run(c, seed);
  std::vector<std::int16_t> want16;
  std::vector<float> want32;
  const portable::GemmStats want = run.reference(want16, want32);
  // The set asked for is the one planned (the fixture skips sets this CPU lacks).
  EXPECT_EQ(make_gemm_cpu_plan(run.problem(), isa).kernel_name,
            flexkit::test::cpu_kernel_name(isa));
  const portable::GemmStats got = gemm_cpu_with_isa(run.problem(), isa);
  expect_same_stats(got, want);
  EXPECT_TRUE(run.c16 == want16);
  EXPECT_EQ(0, std::memcmp(run.c32.data(), want32.data(), sizeof(float) * want32.size()));
}

// Each instruction set's f32 packs against the panel layout of gemm_kernels.hpp, written out here
// from the block's strides: panel p of A holds, for each k, rows p·mr … p·mr + mr − 1 (zero past
// the last row); panel p of B, for each k, columns p·nr … p·nr + nr − 1 (zero past the last
// column). Blocks whose k values are contiguous (the transposing case the vector forms take) and
// others (which they hand to the portable form); every tail of rows, columns and k; nothing
// written past the panels.
TEST_P(GemmCpuKernelsOnIsa, F32PacksMatchThePanelLayout) {
  using flexkit::backend::cpu::gemm_detail::kernels_for;
  using flexkit::backend::cpu::gemm_detail::StridedBlock;
  std::mt19937 rng(97);
  std::uniform_real_distribution<float> value(-4.0f, 4.0f);
  std::vector<float> source(8192);
  for (float& v : source) v = value(rng);
  constexpr std::int64_t kGuard = 64;
  constexpr float kUntouched = -7.0f;  // outside value()'s range
  struct Strides {
    std::int64_t line, k;
  };
  const GemmIsa isa = this->isa();
  const auto kernel = kernels_for(isa).f32;
  for (std::int64_t lines : {1, 5, 6, 7, 13, 17, 63, 64, 65, 100})
    for (std::int64_t kv : {1, 2, 15, 16, 17, 33, 40}) {
      // A: `lines` rows; B: `lines` columns. Element (line, k) at base[line·line stride +
      // k·k stride], base = source + 40 so that a negative k stride stays inside.
      for (bool b_side : {false, true}) {
        const int width = b_side ? kernel.nr : kernel.mr;
        const std::int64_t panels = (lines + width - 1) / width;
        for (Strides st : {Strides{kv + 3, 1}, Strides{1, lines + 2}, Strides{kv, 1}, Strides{0, 1},
                           Strides{kv + 1, -1}}) {
          const float* base = source.data() + 40;
          ASSERT_LE(40 + (lines - 1) * std::abs(st.line) + (kv - 1) * std::abs(st.k),
                    static_cast<std::int64_t>(source.size()));
          SCOPED_TRACE(::testing::Message()
                       << "isa " << int(isa) << (b_side ? " B" : " A") << " lines " << lines
                       << " kv " << kv << " line stride " << st.line << " k stride " << st.k);
          const std::size_t size = static_cast<std::size_t>(panels * width * kv + kGuard);
          std::vector<float> want(size, kUntouched), got(size, kUntouched);
          for (std::int64_t p = 0; p < panels; ++p)
            for (std::int64_t k = 0; k < kv; ++k)
              for (int i = 0; i < width; ++i) {
                const std::int64_t line = p * width + i;
                want[static_cast<std::size_t>((p * kv + k) * width + i)] =
                    line < lines ? base[line * st.line + k * st.k] : 0.0f;
              }
          if (b_side) {
            // B's rows are k: element (k, column) at base[k·rs + column·cs].
            kernel.pack_b(StridedBlock<float>{base, st.k, st.line}, kv, lines, width, got.data());
          } else {
            kernel.pack_a(StridedBlock<float>{base, st.line, st.k}, lines, kv, width, got.data());
          }
          ASSERT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * size));
        }
      }
    }
}

// The integer packs of every instruction set this machine runs against the panel layout of
// gemm_kernels.hpp written out here from the block's strides: A as k pairs of int16 per row, an
// int16 B as k pairs per column in a high (>> 8) and a low (& 255) plane; zeros past the lines and
// after an odd last k; nothing written past the panels. The same strides as the f32 test, and
// k counts on both sides of the vector packs' 32-value blocks.
TEST_P(GemmCpuKernelsOnIsa, IntPacksMatchThePanelLayout) {
  using flexkit::backend::cpu::gemm_detail::kernels_for;
  using flexkit::backend::cpu::gemm_detail::StridedBlock;
  std::mt19937 rng(98);
  std::uniform_int_distribution<int> value(-32768, 32767);
  std::vector<std::int16_t> source(16384);
  for (std::int16_t& v : source) v = static_cast<std::int16_t>(value(rng));
  constexpr std::int64_t kGuard = 64;
  constexpr std::int16_t kUntouched = 0x5a5a;
  struct Strides {
    std::int64_t line, k;
  };
  const GemmIsa isa = this->isa();
  const auto kernels = kernels_for(isa);
  for (const auto& kernel : {kernels.flex16, kernels.u8})
    for (std::int64_t lines : {1, 5, 6, 7, 13, 17, 31, 32, 33, 64, 65, 100})
      for (std::int64_t kv : {1, 2, 15, 16, 17, 31, 32, 33, 40, 64, 65}) {
        for (bool b_side : {false, true}) {
          if (b_side && kernel.planes != 2) continue;  // a u8 B always packs portably
          const int width = b_side ? kernel.nr : kernel.mr;
          const int planes = b_side ? 2 : 1;
          const std::int64_t panels = (lines + width - 1) / width, pairs = (kv + 1) / 2;
          for (Strides st : {Strides{kv + 3, 1}, Strides{1, lines + 2}, Strides{kv, 1},
                             Strides{0, 1}, Strides{kv + 1, -1}}) {
            const std::int16_t* base = source.data() + 80;
            ASSERT_LE(80 + (lines - 1) * std::abs(st.line) + (kv - 1) * std::abs(st.k),
                      static_cast<std::int64_t>(source.size()));
            SCOPED_TRACE(::testing::Message()
                         << "isa " << int(isa) << " planes " << kernel.planes
                         << (b_side ? " B" : " A") << " lines " << lines << " kv " << kv
                         << " line stride " << st.line << " k stride " << st.k);
            const std::size_t size =
                static_cast<std::size_t>(panels * pairs * planes * width * 2 + kGuard);
            std::vector<std::int16_t> want(size, kUntouched), got(size, kUntouched);
            for (std::int64_t p = 0; p < panels; ++p)
              for (std::int64_t pair = 0; pair < pairs; ++pair)
                for (int q = 0; q < planes; ++q)
                  for (int i = 0; i < width; ++i)
                    for (int half = 0; half < 2; ++half) {
                      const std::int64_t line = p * width + i, k = 2 * pair + half;
                      const int v = line < lines && k < kv ? base[line * st.line + k * st.k] : 0;
                      const int plane_value = !b_side ? v : q == 0 ? v >> 8 : v & 255;
                      want[static_cast<std::size_t>(
                          (((p * pairs + pair) * planes + q) * width + i) * 2 + half)] =
                          static_cast<std::int16_t>(plane_value);
                    }
            if (b_side) {
              kernel.pack_b(StridedBlock<std::int16_t>{base, st.k, st.line}, kv, lines, width,
                            got.data());
            } else {
              kernel.pack_a(StridedBlock<std::int16_t>{base, st.line, st.k}, lines, kv, width,
                            got.data());
            }
            ASSERT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(std::int16_t) * size));
          }
        }
      }
}

// The SIMD instruction sets' row rounding (the integer-only store epilogue; the scalar set's is
// the portable rule itself) against the portable rule, element for element, on values chosen around
// its edges: exact ties (to even, both signs), one above and below them, the int16 saturation
// bounds, and the largest exact sums; every row length 1 … 64, so every vector tail; nothing
// written past the row.
TEST_P(GemmCpuKernelsOnSimdIsa, RoundRowMatchesPortableRounding) {
  const GemmIsa isa = this->isa();
  using flexkit::backend::cpu::gemm_detail::kernels_for;
  using flexkit::backend::cpu::gemm_detail::RowStats;
  constexpr std::int64_t kLimit = std::int64_t{1} << 62;  // exact sums stay below it
  std::mt19937_64 rng(5);
  for (int s : {1, 2, 7, 15, 16, 23, 31, 40, 61, 62}) {
    SCOPED_TRACE(::testing::Message() << "scale " << s);
    std::vector<std::int64_t> values;
    // q·2^s + offset, kept where it is an exact sum's value (|v| < 2^62).
    auto add = [&](std::int64_t q, std::int64_t offset) {
      std::int64_t at, v;
      if (__builtin_mul_overflow(q, std::int64_t{1} << s, &at) ||
          __builtin_add_overflow(at, offset, &v) || v <= -kLimit || v >= kLimit)
        return;
      values.push_back(v);
    };
    const std::int64_t half = std::int64_t{1} << (s - 1);
    for (std::int64_t q : {0, 1, -1, 2, -2, 3, -3, 12345, -12345, 32766, 32767, 32768, -32767,
                           -32768, -32769, 65536, -65536}) {
      for (std::int64_t d : {-1, 0, 1}) {
        add(q, d);
        add(q, half + d);
        add(q, -half + d);
      }
    }
    add(0, kLimit - 1);
    add(0, -kLimit + 1);
    for (int i = 0; i < 64; ++i) add(0, static_cast<std::int64_t>(rng()) >> (1 + rng() % 62));
    const portable::GemmEpilogue e = integer_epilogue(s);
    SCOPED_TRACE(::testing::Message() << "isa " << int(isa));
    const auto round_row = kernels_for(isa).round_row;
    ASSERT_NE(round_row, nullptr);
    for (std::size_t start = 0; start < values.size(); start += 37) {
      for (int nv = 1; nv <= 64; ++nv) {
        std::int64_t acc[64];
        for (int j = 0; j < nv; ++j) acc[j] = values[(start + j) % values.size()];
        std::int16_t m[65];
        std::fill(std::begin(m), std::end(m), std::int16_t{-7});
        const RowStats got = round_row(e, acc, nv, m);
        portable::GemmStats want = portable::gemm_stats_identity();
        for (int j = 0; j < nv; ++j) {
          const portable::Flex16Code code = portable::gemm_flex16_result(e, acc[j], 0);
          portable::gemm_stats_store(want, code);
          ASSERT_EQ(m[j], code.m) << "acc " << acc[j] << " nv " << nv;
        }
        ASSERT_EQ(m[nv], -7) << "written past the row, nv " << nv;
        ASSERT_EQ(got.max_abs, want.max_abs_m) << "nv " << nv;
        ASSERT_EQ(static_cast<std::uint64_t>(got.saturated), want.saturated) << "nv " << nv;
      }
    }
  }
}

// The same for the rounding from one call's int32 plane sums (the single-k-block path): every
// accumulator is fed as several (h, l) splits, 256·h + l, with l from 0 … 255 up to ±2^30, and
// as a one-plane sum where it fits int32; every scale the path takes, every row length.
TEST_P(GemmCpuKernelsOnIsa, RoundPlanesRowMatchesPortableRounding) {
  using flexkit::backend::cpu::gemm_detail::kernels_for;
  using flexkit::backend::cpu::gemm_detail::planes_round_fits;
  using flexkit::backend::cpu::gemm_detail::RowStats;
  std::mt19937_64 rng(9);
  const GemmIsa isa = this->isa();
  const auto round = kernels_for(isa).round_planes_row;
  if (round == nullptr) GTEST_SKIP() << isa_name(isa) << " has no plane-sum row rounding";
  SCOPED_TRACE(::testing::Message() << "isa " << int(isa));
  for (int planes : {1, 2}) {
    for (int s = 1; s <= 40; ++s) {
      const portable::GemmEpilogue e = integer_epilogue(s);
      if (!planes_round_fits(e, planes)) continue;
      SCOPED_TRACE(::testing::Message() << "planes " << planes << " scale " << s);
      // Accumulators around ties and the saturation bounds, inside the range one call sums:
      // |acc| < 2^38 (two planes), < 2^31 (one).
      const std::int64_t limit = planes == 2 ? std::int64_t{1} << 38 : std::int64_t{1} << 31;
      std::vector<std::int64_t> accs;
      const std::int64_t half = std::int64_t{1} << (s - 1);
      for (std::int64_t q : {0, 1, -1, 2, -2, 3, -3, 12345, -12345, 32766, 32767, 32768, -32767,
                             -32768, -32769, 65536, -65536})
        for (std::int64_t d : {-1, 0, 1})
          for (std::int64_t at :
               {q * 2 * half + d, q * 2 * half + half + d, q * 2 * half - half + d})
            if (at > -limit && at < limit) accs.push_back(at);
      for (int i = 0; i < 64; ++i)
        accs.push_back(static_cast<std::int64_t>(rng() % std::uint64_t(2 * limit - 1)) -
                       (limit - 1));
      std::vector<std::int32_t> hs, ls;
      std::vector<std::int64_t> want_acc;
      for (std::int64_t acc : accs) {
        if (planes == 1) {
          hs.push_back(static_cast<std::int32_t>(acc));
          want_acc.push_back(acc);
          continue;
        }
        for (std::int64_t shift :
             {std::int64_t{0}, std::int64_t{1} << 22, -(std::int64_t{1} << 22), std::int64_t{3}}) {
          const std::int64_t h = (acc >> 8) - shift, l = (acc & 255) + 256 * shift;
          hs.push_back(static_cast<std::int32_t>(h));
          ls.push_back(static_cast<std::int32_t>(l));
          want_acc.push_back(acc);
        }
      }
      for (std::size_t start = 0; start < hs.size(); start += 29) {
        for (int nv = 1; nv <= 64; ++nv) {
          std::int32_t h[64], l[64];
          std::int64_t acc[64];
          for (int j = 0; j < nv; ++j) {
            const std::size_t at = (start + j) % hs.size();
            h[j] = hs[at];
            l[j] = planes == 2 ? ls[at] : 0;
            acc[j] = want_acc[at];
          }
          std::int16_t m[65];
          std::fill(std::begin(m), std::end(m), std::int16_t{-7});
          const RowStats got = round(e, h, planes == 2 ? l : nullptr, nv, m);
          portable::GemmStats want = portable::gemm_stats_identity();
          for (int j = 0; j < nv; ++j) {
            const portable::Flex16Code code = portable::gemm_flex16_result(e, acc[j], 0);
            portable::gemm_stats_store(want, code);
            ASSERT_EQ(m[j], code.m) << "acc " << acc[j] << " h " << h[j] << " l " << l[j];
          }
          ASSERT_EQ(m[nv], -7) << "written past the row, nv " << nv;
          ASSERT_EQ(got.max_abs, want.max_abs_m) << "nv " << nv;
          ASSERT_EQ(static_cast<std::uint64_t>(got.saturated), want.saturated) << "nv " << nv;
        }
      }
    }
  }
}

TEST_P(GemmCpuKernelsOnIsa, SpecDiscriminator) {
  // A = [32767, −32767, 1], B = [32767, 32767, 1]ᵀ, iwl 15 everywhere: the exact answer is 1.
  std::int16_t a[3] = {32767, -32767, 1}, b[3] = {32767, 32767, 1}, c[1] = {-5};
  GemmProblem p;
  p.m = 1, p.n = 1, p.k = 3;
  p.a = {a, ElementKind::flex16, 3, 1, 0};
  p.b = {b, ElementKind::flex16, 1, 1, 0};
  p.c = {c, ElementKind::flex16, 1, 1, 0};
  p.epilogue = integer_epilogue(15 + 15 - 30);
  const GemmIsa isa = this->isa();
  c[0] = -5;
  const auto s = gemm_cpu_with_isa(p, isa);
  EXPECT_EQ(c[0], 1);
  EXPECT_EQ(s.max_abs_m, 1);
  EXPECT_EQ(s.saturated, 0u);
}

// Every A and B entry −32768 (each vpmaddwd pair would be 2^31) over K = 2^20: acc = 2^50.
TEST_P(GemmCpuKernelsOnIsa, AllMinimumLongK) {
  const std::int64_t k = std::int64_t{1} << 20, m = 2, n = 3;
  std::vector<std::int16_t> a(m * k, -32768), b(k * n, -32768), c(m * n, 7);
  for (std::int64_t kk = 0; kk < k; ++kk) b[kk * n + 2] = 32767;  // one column negative
  GemmProblem p;
  p.m = m, p.n = n, p.k = k;
  p.a = {a.data(), ElementKind::flex16, k, 1, 0};
  p.b = {b.data(), ElementKind::flex16, n, 1, 0};
  p.c = {c.data(), ElementKind::flex16, n, 1, 0};
  const std::int64_t pos = std::int64_t{1} << 50, neg = -(std::int64_t{32768} * 32767) << 20;
  const GemmIsa isa = this->isa();
  p.mode = EpilogueMode::measure;
  p.epilogue = integer_epilogue(0);
  std::fill(c.begin(), c.end(), 7);
  auto s = gemm_cpu_with_isa(p, isa);
  EXPECT_EQ(s.acc_max, pos);
  EXPECT_EQ(s.acc_min, neg);
  EXPECT_TRUE(std::all_of(c.begin(), c.end(), [](std::int16_t v) { return v == 7; }));
  p.mode = EpilogueMode::store;
  p.epilogue = integer_epilogue(36);  // 2^50 · 2^−36 = 2^14
  s = gemm_cpu_with_isa(p, isa);
  for (std::int64_t i = 0; i < m; ++i) {
    EXPECT_EQ(c[i * n + 0], 16384);
    EXPECT_EQ(c[i * n + 1], 16384);
    EXPECT_EQ(c[i * n + 2], portable::gemm_round_shift(neg, 36).m);
  }
  EXPECT_EQ(s.max_abs_m, 16384);
  EXPECT_EQ(s.saturated, 0u);
}

TEST_P(GemmCpuKernelsOnIsa, OddSizesAllPatterns) {
  const Pattern patterns[] = {Pattern::row_major, Pattern::col_major, Pattern::stepped,
                              Pattern::reversed, Pattern::reversed_col_stepped};
  const std::int64_t sizes[][3] = {{1, 1, 1},     {7, 1, 127},   {1, 129, 7},  {127, 7, 129},
                                   {129, 127, 1}, {7, 129, 257}, {13, 33, 600}};
  unsigned seed = 1;
  for (const auto& sz : sizes) {
    for (Pattern pa : patterns) {
      for (Pattern pb : patterns) {
        IntCase c;
        c.m = sz[0], c.n = sz[1], c.k = sz[2];
        c.pa = pa, c.pb = pb;
        c.pc = patterns[seed % 5];
        c.b_u8 = seed % 3 == 0;
        // A scale where some outputs saturate and some round.
        c.epilogue = integer_epilogue(16 + static_cast<int>(seed % 8));
        check_int_case(c, seed++, isa());
      }
    }
  }
}

TEST_P(GemmCpuKernelsOnIsa, BatchedAndBroadcast) {
  IntCase c;
  c.batch = 3, c.m = 19, c.n = 45, c.k = 300;
  for (bool u8 : {false, true}) {
    c.b_u8 = u8;
    c.pa = Pattern::broadcast, c.pb = Pattern::stepped, c.pc = Pattern::reversed;
    check_int_case(c, 11, isa());
    c.pa = Pattern::col_major, c.pb = Pattern::broadcast, c.pc = Pattern::stepped;
    check_int_case(c, 12, isa());
  }
}

// Tall and narrow: the planner splits rows across threads (when there is more than one).
TEST_P(GemmCpuKernelsOnIsa, RowPartsSplit) {
  IntCase c;
  c.m = 300, c.n = 5, c.k = 300;
  c.pa = Pattern::stepped, c.pb = Pattern::reversed, c.pc = Pattern::col_major;
  c.epilogue = integer_epilogue(20);
  check_int_case(c, 31, isa());
  c.b_u8 = true;
  check_int_case(c, 32, isa());
}

TEST_P(GemmCpuKernelsOnIsa, EpilogueVariants) {
  using portable::GemmOutKind;
  IntCase c;
  c.batch = 2, c.m = 37, c.n = 70, c.k = 513;
  c.pa = Pattern::row_major, c.pb = Pattern::col_major, c.pc = Pattern::stepped;
  for (bool u8 : {false, true}) {
    c.b_u8 = u8;
    // beta accumulate into flex16 (the double path), store and measure.
    c.out = ElementKind::flex16;
    c.epilogue = double_epilogue(GemmOutKind::flex16, 0.75, 1.0, -30, -3, 15 - 20);
    c.mode = EpilogueMode::store;
    check_int_case(c, 21, isa());
    c.mode = EpilogueMode::measure;
    check_int_case(c, 22, isa());
    // Integer-only measure.
    c.epilogue = integer_epilogue(20);
    check_int_case(c, 23, isa());
    // f32 outputs, with and without beta.
    c.mode = EpilogueMode::store;
    c.out = ElementKind::f32;
    c.epilogue = double_epilogue(GemmOutKind::f32, 1.0, 0.0, -30, 0, 0);
    check_int_case(c, 24, isa());
    c.epilogue = double_epilogue(GemmOutKind::f32, -2.0, 0.5, -28, 0, 0);
    check_int_case(c, 25, isa());
  }
}

// beta == 0: the old output is never read, so NaN there must not leak into the result.
TEST(GemmCpuKernels, F32BetaZeroIgnoresNaN) {
  const std::int64_t m = 5, n = 9, k = 4;
  std::vector<float> a(m * k, 1.0f), b(k * n, 2.0f), c(m * n, std::nanf(""));
  GemmProblem p;
  p.m = m, p.n = n, p.k = k;
  p.a = {a.data(), ElementKind::f32, k, 1, 0};
  p.b = {b.data(), ElementKind::f32, n, 1, 0};
  p.c = {c.data(), ElementKind::f32, n, 1, 0};
  p.alpha = 1.0f, p.beta = 0.0f;
  flexkit::gemm::gemm_cpu(p);
  for (float v : c) EXPECT_EQ(v, 8.0f);
}

TEST_P(GemmCpuKernelsOnIsa, F32AgainstDouble) {
  const Pattern patterns[] = {Pattern::row_major, Pattern::col_major, Pattern::stepped,
                              Pattern::reversed_col_stepped};
  const std::int64_t sizes[][4] = {
      {1, 1, 1, 1}, {1, 7, 129, 127}, {2, 127, 1, 7}, {1, 129, 127, 300}, {3, 33, 65, 513}};
  unsigned seed = 100;
  for (const auto& sz : sizes) {
    for (Pattern pa : patterns) {
      for (Pattern pb : patterns) {
        const std::int64_t batch = sz[0], m = sz[1], n = sz[2], k = sz[3];
        const Pattern pc = patterns[seed % 4];
        const Layout la = make_layout(pa, batch, m, k), lb = make_layout(pb, batch, k, n),
                     lc = make_layout(pc, batch, m, n);
        std::mt19937 rng(seed++);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        std::vector<float> a(la.size), b(lb.size), c0(lc.size);
        for (auto& x : a) x = u(rng);
        for (auto& x : b) x = u(rng);
        for (auto& x : c0) x = u(rng);
        const float alpha = seed % 2 ? 1.0f : -1.5f, beta = seed % 3 ? 0.0f : 0.25f;
        GemmProblem p;
        p.batch = batch, p.m = m, p.n = n, p.k = k;
        p.a = {a.data() + la.offset, ElementKind::f32, la.rs, la.cs, la.bs};
        p.b = {b.data() + lb.offset, ElementKind::f32, lb.rs, lb.cs, lb.bs};
        p.alpha = alpha, p.beta = beta;
        const GemmIsa isa = this->isa();
        std::vector<float> c = c0;
        p.c = {c.data() + lc.offset, ElementKind::f32, lc.rs, lc.cs, lc.bs};
        gemm_cpu_with_isa(p, isa);
        for (std::int64_t bi = 0; bi < batch; ++bi)
          for (std::int64_t i = 0; i < m; ++i)
            for (std::int64_t j = 0; j < n; ++j) {
              double ref = 0, mag = 0;
              for (std::int64_t kk = 0; kk < k; ++kk) {
                const double t = double(a[la.at(bi, i, kk)]) * b[lb.at(bi, kk, j)];
                ref += t;
                mag += std::fabs(t);
              }
              const double old = c0[lc.at(bi, i, j)];
              ref = alpha * ref + beta * old;
              mag = std::fabs(alpha) * mag + std::fabs(beta * old);
              const double tol = (double(k) + 3) * std::ldexp(1.0, -24) * mag + 1e-30;
              ASSERT_NEAR(c[lc.at(bi, i, j)], ref, tol) << "isa " << int(isa);
            }
        // Elements outside the view are untouched.
        std::vector<bool> viewed(c.size(), false);
        for (std::int64_t bi = 0; bi < batch; ++bi)
          for (std::int64_t i = 0; i < m; ++i)
            for (std::int64_t j = 0; j < n; ++j) viewed[lc.at(bi, i, j)] = true;
        for (std::size_t idx = 0; idx < c.size(); ++idx)
          if (!viewed[idx]) {
            ASSERT_EQ(c[idx], c0[idx]);
          }
        // Every instruction set runs the same fma chain: bit-identical f32 results.
        if (isa != GemmIsa::scalar) {
          std::vector<float> scalar = c0;
          p.c = {scalar.data() + lc.offset, ElementKind::f32, lc.rs, lc.cs, lc.bs};
          gemm_cpu_with_isa(p, GemmIsa::scalar);
          EXPECT_EQ(0, std::memcmp(scalar.data(), c.data(), sizeof(float) * c.size()))
              << "isa " << isa_name(isa) << " against scalar";
        }
      }
    }
  }
}

// The planner's candidates, fastest first: a plan capped at a set this CPU runs takes that set,
// and names it; the faster sets are passed over, with their reason.
TEST_P(GemmCpuKernelsOnIsa, PlannedKernelIsTheSetAskedFor) {
  std::vector<std::int16_t> a(64 * 32), b(32 * 48), c(64 * 48);
  GemmProblem p;
  p.m = 64, p.n = 48, p.k = 32;
  p.a = {a.data(), ElementKind::flex16, 32, 1, 0};
  p.b = {b.data(), ElementKind::flex16, 48, 1, 0};
  p.c = {c.data(), ElementKind::flex16, 48, 1, 0};
  const auto plan = make_gemm_cpu_plan(p, isa());
  EXPECT_EQ(plan.kernel_name, flexkit::test::cpu_kernel_name(isa()));
  EXPECT_EQ(plan.isa, isa());
  EXPECT_GT(plan.workspace_bytes, 0u);
  EXPECT_EQ(plan.passed_over.empty(), true) << plan.passed_over;  // nothing faster was allowed
  // Capped at the fastest set, the plan is this CPU's best and says why the others were not.
  const auto best = make_gemm_cpu_plan(p, GemmIsa::avx512);
  EXPECT_EQ(best.kernel_name, flexkit::test::cpu_kernel_name(gemm_hardware_isa()));
  EXPECT_EQ(best.passed_over.empty(), gemm_hardware_isa() == GemmIsa::avx512) << best.passed_over;
}

// dot's own plan follows FLEXKIT_GEMM_ISA (CTest runs this binary with it set to avx2 and to
// scalar as well): dot_kernel_name names that set for every product type.
TEST(GemmCpuKernels, DotPlansTheCappedSet) {
  using flexkit::Array;
  using flexkit::DType;
  const std::string want = flexkit::test::expected_cpu_kernel_name();
  for (DType b_type : {DType::flex16, DType::u8}) {
    const Array a = Array::zeros({33, 20}, DType::flex16), b = Array::zeros({20, 17}, b_type);
    EXPECT_EQ(flexkit::dot_kernel_name(a, b, Array::zeros({33, 17}, DType::flex16), {.iwl = 2}),
              want);
  }
  const Array f = Array::zeros({33, 20}, DType::f32), g = Array::zeros({20, 17}, DType::f32);
  EXPECT_EQ(flexkit::dot_kernel_name(f, g, Array::zeros({33, 17}, DType::f32)), want);
}

INSTANTIATE_TEST_SUITE_P(Isa, GemmCpuKernelsOnIsa,
                         ::testing::Values(GemmIsa::scalar, GemmIsa::avx2, GemmIsa::avx512),
                         isa_test_name);
INSTANTIATE_TEST_SUITE_P(Isa, GemmCpuKernelsOnSimdIsa,
                         ::testing::Values(GemmIsa::avx2, GemmIsa::avx512), isa_test_name);

}  // namespace

// The kernels' branch-free store rounding against an independent rounding by division (and the
// general gemm_round_shift) for every shift it is used with: ties both ways, values around every
// saturation edge, and random accumulators up to its bound 2^62.
TEST(GemmCpuKernels, BranchFreeRoundingMatchesTheExactRule) {
  std::mt19937_64 rng(99);
  auto reference = [](std::int64_t acc, int s) {
    // unit ≤ 2^62 and 0 ≤ rem < unit, so 2·rem stays inside int64.
    const std::int64_t unit = std::int64_t{1} << s;
    std::int64_t q = acc / unit, rem = acc % unit;  // truncated toward zero
    if (rem < 0) rem += unit, q -= 1;               // floor
    if (2 * rem > unit || (2 * rem == unit && (q & 1))) q += 1;
    const bool saturated = q > 32767 || q < -32768;
    return std::pair<std::int64_t, bool>(saturated ? (q > 0 ? 32767 : -32768) : q, saturated);
  };
  int checked = 0;
  for (int s = 1; s <= 62; ++s) {
    std::vector<std::int64_t> values;
    const std::int64_t unit = std::int64_t{1} << s;
    for (std::int64_t q : {0LL, 1LL, -1LL, 2LL, -2LL, 32766LL, 32767LL, -32768LL, -32769LL})
      for (std::int64_t d : {-1LL, 0LL, 1LL})
        if (s < 45) {
          values.push_back(q * unit + unit / 2 + d);  // ties and their neighbours
          values.push_back(q * unit + d);
        }
    const std::int64_t bound = std::int64_t{1} << 62;
    for (int i = 0; i < 2000; ++i) {
      const std::int64_t v = static_cast<std::int64_t>(rng() >> (1 + rng() % 63));
      values.push_back(v % bound);
      values.push_back(-(v % bound));
    }
    values.push_back(bound - 1);
    values.push_back(-(bound - 1));
    for (std::int64_t acc : values) {
      const auto want = reference(acc, s);
      const portable::Flex16Code fast = portable::gemm_round_shift_right(acc, s);
      const portable::Flex16Code general = portable::gemm_round_shift(acc, s);
      ASSERT_EQ(fast.m, want.first) << "acc " << acc << " s " << s;
      ASSERT_EQ(fast.saturated, want.second) << "acc " << acc << " s " << s;
      ASSERT_EQ(general.m, fast.m) << "acc " << acc << " s " << s;
      ++checked;
    }
  }
  EXPECT_GT(checked, 200000);
}

// The shallow kernels' 32-bit rounding from the three byte products (and from an int32
// accumulator) against the same independent rule on the recombined int64 accumulator: ties and
// their neighbours at every shift the kernels take, the byte products' extremes, and random
// decompositions (one shift below the range, the multiplier 2^31 overflows and this fails).
TEST(GemmCpuKernels, ThirtyTwoBitRoundingMatchesTheExactRule) {
  std::mt19937_64 rng(7);
  auto reference = [](std::int64_t acc, int s) {  // unclamped RNE(acc / 2^s)
    const std::int64_t unit = std::int64_t{1} << s;
    std::int64_t q = acc / unit, rem = acc % unit;
    if (rem < 0) rem += unit, q -= 1;
    if (2 * rem > unit || (2 * rem == unit && (q & 1))) q += 1;
    return q;
  };
  // The bounds the kernels guarantee: ≤ 256 products of bytes.
  const std::int32_t hh_max = 256 * 128 * 128, mid_max = 256 * 2 * 128 * 255,
                     ll_max = 256 * 255 * 255;
  int checked = 0;
  for (int s = portable::kByteProductRoundingMinShift; s <= 31; ++s) {
    // Targets: ties q·2^s + 2^(s−1) ± 1 and exact multiples, then a decomposition of each.
    std::vector<std::int64_t> targets;
    for (std::int64_t q :
         {0LL, 1LL, -1LL, 2LL, -2LL, 32767LL, -32768LL, 32768LL, -32769LL, 12345LL, -9876LL})
      for (std::int64_t d : {-1LL, 0LL, 1LL}) {
        targets.push_back(q * (std::int64_t{1} << s) + (std::int64_t{1} << (s - 1)) + d);
        targets.push_back(q * (std::int64_t{1} << s) + d);
      }
    for (std::int64_t t : targets) {
      for (int rep = 0; rep < 8; ++rep) {
        // hh near t / 65536, the rest split between mid (either sign) and ll ≥ 0.
        const std::int64_t hh = (t >> 16) - static_cast<std::int64_t>(rng() % 64);
        const std::int64_t rest = t - 65536 * hh;  // in [0, 2^22 + 2^16)
        const std::int64_t mid = (rest >> 8) - static_cast<std::int64_t>(rng() % 256);
        const std::int64_t ll = rest - 256 * mid;
        if (hh < -hh_max || hh > hh_max) break;  // beyond what 256 products reach
        ASSERT_TRUE(ll >= 0 && ll <= ll_max && mid >= -mid_max && mid <= mid_max);
        const std::int32_t got = portable::gemm_round_byte_products(
            static_cast<std::int32_t>(hh), static_cast<std::int32_t>(mid),
            static_cast<std::int32_t>(ll), s);
        ASSERT_EQ(got, reference(t, s)) << "acc " << t << " s " << s;
        ++checked;
      }
    }
    for (int i = 0; i < 20000; ++i) {
      const auto pick = [&](std::int64_t lo, std::int64_t hi) {
        return lo + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(hi - lo + 1));
      };
      std::int64_t hh = pick(-hh_max, hh_max), mid = pick(-mid_max, mid_max), ll = pick(0, ll_max);
      if (i % 4 == 0) hh = i % 8 == 0 ? hh_max : -hh_max;  // the extremes
      if (i % 6 == 0) mid = i % 12 == 0 ? mid_max : -mid_max;
      if (i % 10 == 0) ll = ll_max;
      const std::int64_t acc = 65536 * hh + 256 * mid + ll;
      ASSERT_EQ(portable::gemm_round_byte_products(static_cast<std::int32_t>(hh),
                                                   static_cast<std::int32_t>(mid),
                                                   static_cast<std::int32_t>(ll), s),
                reference(acc, s))
          << "hh " << hh << " mid " << mid << " ll " << ll << " s " << s;
      ++checked;
    }
  }
  for (int s = 1; s <= 31; ++s) {
    std::vector<std::int64_t> values = {INT32_MAX, INT32_MIN + 1, 0, 1, -1};
    for (std::int64_t q : {0LL, 1LL, -1LL, 32767LL, -32768LL, 40000LL})
      for (std::int64_t d : {-1LL, 0LL, 1LL}) {
        const std::int64_t v = q * (std::int64_t{1} << s) + (std::int64_t{1} << (s - 1)) + d;
        if (v > INT32_MIN && v < INT32_MAX) values.push_back(v);
      }
    for (int i = 0; i < 5000; ++i)
      values.push_back(static_cast<std::int32_t>(static_cast<std::uint32_t>(rng())));
    for (std::int64_t acc : values) {
      if (acc < -2139095040LL || acc > 2139095040LL) continue;  // ≤ 256 · 32768 · 255
      ASSERT_EQ(portable::gemm_round_int32(static_cast<std::int32_t>(acc), s), reference(acc, s))
          << "acc " << acc << " s " << s;
      ++checked;
    }
  }
  EXPECT_GT(checked, 300000);
}
