// CPU update (the filter gradient): gradF[(c,t,r,s), k] = Σ_{n, positions} Iup[…] · E[k, …].
// The reduction runs over the batch and every output position, so it is not lowered at once:
// each work unit (a range of filter rows × a range of output channels × a slice of positions)
// lowers a bounded chunk of the input at a time and feeds it, with the matching columns of E, to
// the GEMM microkernels, which add into the unit's own int64 (f32) accumulators. Integer slices
// are then summed exactly, so the result does not depend on how the work was cut; f32 work is
// cut by filter rows and output channels only (never along the reduction), so every element sees
// one summation order whatever the thread count.
#include <algorithm>
#include <memory>
#include <type_traits>
#include <vector>

#include "backend/cpu/gemm/gemm_kernels.hpp"
#include "backend/cpu/gemm/gemm_pack.hpp"
#include "backend/cpu/thread_pool.hpp"
#include "conv/conv_cpu.hpp"
#include "conv/conv_lower.hpp"

namespace flexkit::conv {
namespace {

namespace gd = backend::cpu::gemm_detail;
using gemm::ElementKind;
using portable::GemmStats;

// k values per microkernel call: the most an integer call may sum exactly in int32.
constexpr std::int64_t kChunk = 2 * gd::kMaxIntPairs;
// Columns (positions × N) lowered at once.
constexpr std::int64_t kLoweredColumns = 4 * kChunk;
// Widest range of filter rows one unit owns.
constexpr std::int64_t kMaxUnitRows = 256;
// Narrowest range of filter rows an f32 unit owns (where the layer has that many).
constexpr std::int64_t kMinF32UnitRows = 64;
// Below this many multiply-adds the threads cost more than they save.
constexpr double kSerialMacs = 1 << 18;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}
std::int64_t round_up(std::int64_t a, std::int64_t b) {
  return ceil_div(a, b) * b;
}

// How the filter rows, the output channels and the positions are cut into units.
struct Split {
  std::int64_t unit_rows = 0, row_units = 0;
  std::int64_t unit_channels = 0, channel_units = 1;
  std::int64_t slices = 1;
  std::int64_t units() const { return row_units * channel_units * slices; }
};

// nr and mr: the microkernel's widths along the filter rows and the output channels.
Split make_split(const Geometry& g, int nr, int mr, bool integer) {
  const std::int64_t rows = g.C * g.taps();
  const std::int64_t want = 2 * static_cast<std::int64_t>(backend::cpu::worker_count());
  Split s;
  // f32 row ranges of at least 64 rows: each range packs E's channels again for every position,
  // which a narrow range (16 rows with AVX2's 16-column panels) cannot amortise. Measured under
  // FLEXKIT_GEMM_ISA=avx2, 1x1 C64 K256 56x56 f32 update: four 16-row ranges 56-58 GOP/s, one
  // 64-row range cut into two channel halves (below) 100-101.
  const std::int64_t narrowest =
      integer ? nr : std::min(round_up(kMinF32UnitRows, nr), round_up(rows, nr));
  s.unit_rows = std::clamp(round_up(ceil_div(rows, want), nr), narrowest,
                           std::max(narrowest, round_up(std::min(rows, kMaxUnitRows), nr)));
  s.row_units = ceil_div(rows, s.unit_rows);
  // f32 with fewer row ranges than workers (a 1x1 layer with few input channels: one 64-row
  // range ran on one core): the output channels are cut too, into runs of whole microkernel
  // panels. That changes no element's summation, so the result stays independent of the cut.
  // Each channel run lowers its rows' input again, so only idle workers justify it (cutting
  // 3x3 C64's three row ranges into six units measured no faster). Integer work is cut along
  // the positions instead, which lowers no input twice.
  const std::int64_t workers = backend::cpu::worker_count();
  s.unit_channels = g.K;
  if (!integer && s.row_units < workers) {
    const std::int64_t pieces = std::min(ceil_div(workers, s.row_units), ceil_div(g.K, mr));
    s.unit_channels = round_up(ceil_div(g.K, pieces), mr);
  }
  s.channel_units = ceil_div(g.K, s.unit_channels);
  if (integer) {  // exact sums: position slices may be added in any order
    const std::int64_t columns = g.out_positions() * g.N;
    s.slices = std::clamp<std::int64_t>(ceil_div(want, s.row_units * s.channel_units), 1,
                                        std::max<std::int64_t>(1, columns / kLoweredColumns));
  }
  return s;
}

// TA: E's elements and the packed A (int16 or float); TI: the input's (int16, uint8 or float);
// Acc: the accumulator (int64 or float).
template <typename TA, typename TI, typename Acc>
struct UpdateKernel {
  static constexpr bool kInteger = std::is_same_v<Acc, std::int64_t>;
  int mr, nr, planes;
  void (*fn)(std::int64_t, const TA*, const TA*, Acc*, std::int64_t, bool);
  // The instruction set's packs; pack_b for an input of E's type (a u8 input packs portably).
  using PackFn = void (*)(gd::StridedBlock<TA>, std::int64_t, std::int64_t, int, TA*);
  PackFn pack_a = nullptr, pack_b = nullptr;
};

// One worker's scratch, sized for the widest unit.
template <typename TA, typename TI>
struct UnitScratch {
  std::vector<TI> lowered;
  std::vector<TA> a_pack, b_pack;
};

// Adds one unit's products, output channels [k0, k1), into acc (round_up(k1 − k0, mr) × ld,
// zeroed by the caller).
template <typename TA, typename TI, typename Acc>
void run_unit(const ConvProblem& pr, const UpdateKernel<TA, TI, Acc>& kr, std::int64_t r0,
              std::int64_t r1, std::int64_t k0, std::int64_t k1, std::int64_t pos0,
              std::int64_t pos1, Acc* acc, std::int64_t ld, UnitScratch<TA, TI>& s) {
  const Geometry& g = pr.g;
  const std::int64_t N = g.N, K = k1 - k0, rows = r1 - r0;
  const std::int64_t per_chunk = std::max<std::int64_t>(1, kLoweredColumns / N);
  s.lowered.resize(static_cast<std::size_t>(rows * std::min(per_chunk, pos1 - pos0) * N));
  s.a_pack.resize(static_cast<std::size_t>(round_up(K, kr.mr) * kChunk));
  s.b_pack.resize(static_cast<std::size_t>(round_up(rows, kr.nr) * kChunk * kr.planes));
  const std::int64_t sk = pr.y.stride[0], sj = pr.y.stride[4];
  const TA* e = operand_data<TA>(pr.y) + k0 * sk;
  for (std::int64_t p0 = pos0; p0 < pos1; p0 += per_chunk) {
    const std::int64_t p1 = std::min(pos1, p0 + per_chunk), cols = (p1 - p0) * N;
    lower_input<TI>(g, pr.x, r0, r1, p0, p1, s.lowered.data(), cols);
    for (std::int64_t c0 = 0; c0 < cols; c0 += kChunk) {
      const std::int64_t kv = std::min(kChunk, cols - c0);
      const TA* e_block = e + (p0 * N + c0) * sj;
      const TI* b_block = s.lowered.data() + c0;
      // Both operands hold k contiguously: transposing packs, vector forms where the
      // instruction set has them (a u8 input's B packs portably).
      kr.pack_a({e_block, sk, sj}, K, kv, kr.mr, s.a_pack.data());
      if constexpr (std::is_same_v<TI, TA>) {
        kr.pack_b({b_block, 1, cols}, kv, rows, kr.nr, s.b_pack.data());
      } else {
        gd::pack_b_int(gd::StridedBlock<TI>{b_block, 1, cols}, kv, rows, kr.nr, s.b_pack.data());
      }
      std::int64_t a_panel, b_panel, depth;
      if constexpr (UpdateKernel<TA, TI, Acc>::kInteger) {
        depth = (kv + 1) / 2;  // k pairs
        a_panel = depth * kr.mr * 2;
        b_panel = depth * kr.planes * kr.nr * 2;
      } else {
        depth = kv;
        a_panel = kv * kr.mr;
        b_panel = kv * kr.nr;
      }
      for (std::int64_t jj = 0; jj < rows; jj += kr.nr)
        for (std::int64_t ii = 0; ii < K; ii += kr.mr)
          kr.fn(depth, s.a_pack.data() + (ii / kr.mr) * a_panel,
                s.b_pack.data() + (jj / kr.nr) * b_panel, acc + ii * ld + jj, ld, true);
    }
  }
}

// Output channels whose sums one task adds up and finishes: a block of 16 × rows accumulators
// stays in cache between the two, and the output's rows (K innermost in the filter layout) are
// written 16 consecutive elements at a time.
constexpr std::int64_t kFinishChannels = 16;

// Writes (or measures) output channels [k0, k1) of gradF from their sums (`total`, (k − k0) ×
// rows) through the portable epilogue. The common case (gemm_rounds_by_right_shift) takes the
// branch-free rounding of the GPU kernels.
template <typename Acc>
GemmStats finish_channels(const ConvProblem& pr, const Acc* total, std::int64_t rows,
                          std::int64_t k0, std::int64_t k1) {
  GemmStats stats = portable::gemm_stats_identity();
  const portable::GemmEpilogue& e = pr.epilogue;
  const gemm::OutputRef& c = pr.out;
  const bool store = pr.mode == gemm::EpilogueMode::store;
  const std::int64_t products = pr.g.out_positions() * pr.g.N;
  if constexpr (!std::is_same_v<Acc, float>) {
    if (store && portable::gemm_rounds_by_right_shift(e, products)) {
      auto* const out = static_cast<std::int16_t*>(c.data);
      for (std::int64_t row = 0; row < rows; ++row) {
        for (std::int64_t k = k0; k < k1; ++k) {
          const portable::Flex16Code code =
              portable::gemm_round_shift_right(total[(k - k0) * rows + row], e.scale);
          out[row * c.row_stride + k * c.col_stride] = code.m;
          portable::gemm_stats_store(stats, code);
        }
      }
      return stats;
    }
  }
  for (std::int64_t row = 0; row < rows; ++row) {
    for (std::int64_t k = k0; k < k1; ++k) {
      const Acc a = total[(k - k0) * rows + row];
      const std::int64_t at = row * c.row_stride + k * c.col_stride;
      if constexpr (std::is_same_v<Acc, float>) {
        float* o = static_cast<float*>(c.data) + at;
        *o = pr.beta == 0.0f ? pr.alpha * a : pr.alpha * a + pr.beta * *o;
      } else if (c.kind == ElementKind::flex16) {
        std::int16_t* o = static_cast<std::int16_t*>(c.data) + at;
        const std::int16_t old = e.reads_old ? *o : std::int16_t{0};
        if (store) {
          const portable::Flex16Code code = portable::gemm_flex16_result(e, a, old);
          *o = code.m;
          portable::gemm_stats_store(stats, code);
        } else {
          portable::gemm_stats_measure(stats, e, a, old);
        }
      } else if (store) {  // f32 output of an integer product (never measured)
        float* o = static_cast<float*>(c.data) + at;
        *o = portable::gemm_f32_result(e, a, e.reads_old ? *o : 0.0f);
      }
    }
  }
  return stats;
}

template <typename TA, typename TI, typename Acc>
GemmStats update_typed(const ConvProblem& pr, const UpdateKernel<TA, TI, Acc>& kr) {
  const Geometry& g = pr.g;
  const std::int64_t rows = g.C * g.taps(), positions = g.out_positions();
  const Split split = make_split(g, kr.nr, kr.mr, UpdateKernel<TA, TI, Acc>::kInteger);
  const std::int64_t acc_rows = round_up(split.unit_channels, kr.mr), ld = split.unit_rows;
  // Unit u: filter rows u / (channel_units · slices), channels (u / slices) % channel_units,
  // position slice u % slices.
  struct UnitRange {
    std::int64_t r0, r1, k0, k1, slice;
  };
  auto range_of = [&](std::int64_t u) {
    UnitRange r;
    const std::int64_t ru = u / (split.channel_units * split.slices);
    const std::int64_t ku = (u / split.slices) % split.channel_units;
    r.slice = u % split.slices;
    r.r0 = ru * split.unit_rows;
    r.r1 = std::min(rows, r.r0 + split.unit_rows);
    r.k0 = ku * split.unit_channels;
    r.k1 = std::min(g.K, r.k0 + split.unit_channels);
    return r;
  };
  std::vector<std::vector<Acc>> unit_acc(static_cast<std::size_t>(split.units()));
  const double macs = static_cast<double>(rows) * static_cast<double>(g.K) *
                      static_cast<double>(positions) * static_cast<double>(g.N);
  const std::int64_t units = split.units();
  backend::cpu::parallel_for(
      units, macs < kSerialMacs ? units : 1, [&](std::int64_t begin, std::int64_t end) {
        UnitScratch<TA, TI> scratch;
        for (std::int64_t u = begin; u < end; ++u) {
          const UnitRange r = range_of(u);
          const std::int64_t pos0 = positions * r.slice / split.slices,
                             pos1 = positions * (r.slice + 1) / split.slices;
          auto& acc = unit_acc[static_cast<std::size_t>(u)];
          acc.assign(static_cast<std::size_t>(acc_rows * ld), Acc{});
          if (pos1 > pos0)
            run_unit(pr, kr, r.r0, r.r1, r.k0, r.k1, pos0, pos1, acc.data(), ld, scratch);
        }
      });
  // The units' accumulators summed and finished per block of output channels, the blocks spread
  // over the workers (integer sums: exact in any order; f32 units never share an element, so
  // each f32 sum has one term; the statistics are maxima, minima and counts).
  const std::int64_t blocks = ceil_div(g.K, kFinishChannels);
  std::vector<GemmStats> block_stats(static_cast<std::size_t>(blocks),
                                     portable::gemm_stats_identity());
  backend::cpu::parallel_for(
      blocks, macs < kSerialMacs ? blocks : 1, [&](std::int64_t begin, std::int64_t end) {
        std::vector<Acc> total(static_cast<std::size_t>(std::min(g.K, kFinishChannels) * rows));
        for (std::int64_t b = begin; b < end; ++b) {
          const std::int64_t k0 = b * kFinishChannels, k1 = std::min(g.K, k0 + kFinishChannels);
          std::fill(total.begin(), total.begin() + (k1 - k0) * rows, Acc{});
          for (std::int64_t u = 0; u < units; ++u) {
            const UnitRange r = range_of(u);
            const std::int64_t ka = std::max(k0, r.k0), kb = std::min(k1, r.k1);
            const Acc* acc = unit_acc[static_cast<std::size_t>(u)].data();
            for (std::int64_t k = ka; k < kb; ++k) {
              const Acc* from = acc + (k - r.k0) * ld - r.r0;
              Acc* into = total.data() + (k - k0) * rows;
              for (std::int64_t row = r.r0; row < r.r1; ++row) into[row] += from[row];
            }
          }
          block_stats[static_cast<std::size_t>(b)] =
              finish_channels(pr, total.data(), rows, k0, k1);
        }
      });
  GemmStats stats = portable::gemm_stats_identity();
  for (const GemmStats& s : block_stats) portable::gemm_stats_merge(stats, s);
  return stats;
}

}  // namespace

GemmStats update_cpu(const ConvProblem& pr, GemmIsa isa) {
  const gd::KernelSet ks = gd::kernels_for(isa);
  if (pr.x.kind == ElementKind::f32) {
    const UpdateKernel<float, float, float> kr{ks.f32.mr, ks.f32.nr,     1,
                                               ks.f32.fn, ks.f32.pack_a, ks.f32.pack_b};
    return update_typed(pr, kr);
  }
  if (pr.x.kind == ElementKind::u8) {
    const UpdateKernel<std::int16_t, std::uint8_t, std::int64_t> kr{
        ks.u8.mr, ks.u8.nr, ks.u8.planes, ks.u8.fn, ks.u8.pack_a};
    return update_typed(pr, kr);
  }
  const UpdateKernel<std::int16_t, std::int16_t, std::int64_t> kr{
      ks.flex16.mr, ks.flex16.nr,     ks.flex16.planes,
      ks.flex16.fn, ks.flex16.pack_a, ks.flex16.pack_b};
  return update_typed(pr, kr);
}

std::size_t update_workspace_bytes(const Geometry& g, std::size_t element_bytes) {
  // Accumulators (8 bytes each: int64, or f32 rounded up) for every slice, a block of
  // kFinishChannels channels' sums per finishing worker, and one worker's lowered chunk.
  const std::int64_t rows = g.C * g.taps();
  const Split split = make_split(g, 1, 1, element_bytes != 4);
  const std::int64_t finishing = std::min<std::int64_t>(
      static_cast<std::int64_t>(backend::cpu::worker_count()), ceil_div(g.K, kFinishChannels));
  const std::int64_t accumulators =
      (split.slices * g.K + finishing * std::min(g.K, kFinishChannels)) * rows * 8;
  const std::int64_t lowered = std::min(rows, kMaxUnitRows) *
                               std::max<std::int64_t>(kLoweredColumns, g.N) *
                               static_cast<std::int64_t>(element_bytes);
  return static_cast<std::size_t>(accumulators + lowered);
}

}  // namespace flexkit::conv
