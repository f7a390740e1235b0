// The stream-K schedule of the implicit-GEMM kernels (flexkit/portable/stream_k.hpp), replayed on
// the CPU as the kernels walk it: every (tile, stage) of a launch is computed exactly once, whole
// tiles come in whole rounds, the shared stages are spread evenly, and the schedule stays off
// where it cannot help.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "flexkit/portable/stream_k.hpp"

namespace {

namespace portable = flexkit::portable;

constexpr std::int64_t kMaxStages = 512;

struct Replay {
  std::vector<int> covered;           // per (tile, stage): how many parts computed it
  std::vector<std::int64_t> per_cta;  // stages each CTA runs
  std::vector<std::int64_t> parts;    // work items each CTA runs
  // Per shared tile, the workspace slots its parts were stored in, in CTA order.
  std::vector<std::vector<std::int64_t>> slots;
};

// What CTA c does, item by item, as stream_k_item in gemm_wgmma.cuh decides it.
Replay replay(std::int64_t tiles, std::int64_t stages, std::int64_t ctas,
              const portable::StreamKSchedule& s) {
  Replay r;
  r.covered.assign(static_cast<std::size_t>(tiles * stages), 0);
  r.per_cta.assign(static_cast<std::size_t>(ctas), 0);
  r.parts.assign(static_cast<std::size_t>(ctas), 0);
  r.slots.assign(static_cast<std::size_t>(tiles - s.first_shared_tile), {});
  const std::int64_t parts_per_cta =
      s.sharing_ctas == 0
          ? 0
          : portable::stream_k_parts_per_cta(tiles - s.first_shared_tile, stages, s.sharing_ctas);
  const std::int64_t whole_rounds = s.first_shared_tile / ctas;
  for (std::int64_t cta = 0; cta < ctas; ++cta) {
    for (std::int64_t round = 0; round < whole_rounds; ++round) {
      const std::int64_t tile = round * ctas + cta;
      for (std::int64_t st = 0; st < stages; ++st) ++r.covered[tile * stages + st];
      r.per_cta[cta] += stages;
      ++r.parts[cta];
    }
    portable::StreamKPart part;
    std::int64_t last_tile = -1;
    for (std::int64_t index = 0; portable::stream_k_part(tiles - s.first_shared_tile, stages,
                                                         s.sharing_ctas, cta, index, part);
         ++index) {
      EXPECT_GT(part.tile, last_tile) << "parts walk forward, one per tile";
      last_tile = part.tile;
      EXPECT_GE(part.first_stage, 0);
      EXPECT_LT(part.first_stage, part.end_stage) << "no empty part";
      EXPECT_LE(part.end_stage, stages);
      const std::int64_t tile = s.first_shared_tile + part.tile;
      EXPECT_LT(tile, tiles);
      if (tile >= tiles) return r;
      for (std::int64_t st = part.first_stage; st < part.end_stage; ++st)
        ++r.covered[tile * stages + st];
      r.per_cta[cta] += part.end_stage - part.first_stage;
      ++r.parts[cta];
      EXPECT_LT(index, parts_per_cta) << "a part past the CTA's slots";
      r.slots[part.tile].push_back(cta * parts_per_cta + index);
    }
  }
  return r;
}

TEST(StreamKSchedule, EveryStageOnceAndEvenlySpread) {
  int checked = 0;
  for (std::int64_t ctas : {1, 2, 5, 7, 132}) {
    for (std::int64_t tiles : {1, 2, 3, 36, 131, 133, 144, 196, 263, 1000}) {
      for (std::int64_t stages : {4, 5, 9, 36, 49, 196, 512}) {
        const portable::StreamKSchedule s =
            portable::stream_k_schedule(tiles, stages, ctas, kMaxStages);
        const std::int64_t rounds = (tiles + ctas - 1) / ctas;
        if (tiles * 10 >= rounds * ctas * portable::kStreamKFullTenths) {
          EXPECT_EQ(s.sharing_ctas, 0) << "nearly full rounds need no sharing";
          continue;
        }
        ASSERT_GT(s.sharing_ctas, 0);
        ASSERT_LE(s.sharing_ctas, ctas);
        EXPECT_EQ(s.first_shared_tile % ctas, 0);
        EXPECT_EQ(s.first_shared_tile, tiles / ctas * ctas);
        const Replay r = replay(tiles, stages, ctas, s);
        for (std::size_t i = 0; i < r.covered.size(); ++i)
          ASSERT_EQ(r.covered[i], 1) << "tiles " << tiles << " stages " << stages << " ctas "
                                     << ctas << ": tile " << i / stages << " stage " << i % stages;
        // The finish finds each shared tile's parts where the CTAs stored them.
        const std::int64_t shared = tiles - s.first_shared_tile;
        const std::int64_t parts_per_cta =
            portable::stream_k_parts_per_cta(shared, stages, s.sharing_ctas);
        for (std::int64_t t = 0; t < shared; ++t) {
          const portable::StreamKTileParts tp =
              portable::stream_k_tile_parts(shared, stages, s.sharing_ctas, t);
          std::vector<std::int64_t> found;
          for (std::int64_t c = tp.first_cta; c <= tp.last_cta; ++c)
            found.push_back(
                portable::stream_k_slot(shared, stages, s.sharing_ctas, parts_per_cta, c, t));
          ASSERT_EQ(found, r.slots[t]) << "tiles " << tiles << " stages " << stages << " ctas "
                                       << ctas << ": shared tile " << t;
        }
        // Sharing CTAs differ by at most one stage; the others run only whole tiles.
        const auto sharing_end = r.per_cta.begin() + s.sharing_ctas;
        const auto [lo, hi] = std::minmax_element(r.per_cta.begin(), sharing_end);
        EXPECT_LE(*hi - *lo, 1);
        const std::int64_t units = (tiles - s.first_shared_tile) * stages;
        EXPECT_GE(units / s.sharing_ctas, std::min(units, portable::kStreamKMinStagesPerCta))
            << "parts long enough to pay for their start";
        // A CTA's share touches at most ceil(share / stages) + 1 tiles.
        const std::int64_t whole_rounds = s.first_shared_tile / ctas;
        for (std::int64_t c = 0; c < s.sharing_ctas; ++c) {
          const std::int64_t share = r.per_cta[c] - whole_rounds * stages;
          EXPECT_LE(r.parts[c] - whole_rounds, (share + stages - 1) / stages + 1);
        }
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 100);
}

TEST(StreamKSchedule, ResNetLayersOnAnH200) {
  // 3×3 C256 K256 14×14 fprop: 196 tiles of 36 stages on 132 multiprocessors. Whole tiles alone
  // take two rounds (72 stages on the busiest CTA); stream-K gives every CTA 53 or 54.
  const portable::StreamKSchedule s = portable::stream_k_schedule(196, 36, 132, kMaxStages);
  EXPECT_EQ(s.first_shared_tile, 132);
  EXPECT_EQ(s.sharing_ctas, 132);
  const Replay r = replay(196, 36, 132, s);
  const auto [lo, hi] = std::minmax_element(r.per_cta.begin(), r.per_cta.end());
  EXPECT_EQ(*lo, 53);
  EXPECT_EQ(*hi, 54);
  // 3×3 update at 14×14: 36 tiles (9 taps × 2 × 2) of 196 stages, no whole round.
  const portable::StreamKSchedule u = portable::stream_k_schedule(36, 196, 132, kMaxStages);
  EXPECT_EQ(u.first_shared_tile, 0);
  EXPECT_EQ(u.sharing_ctas, 132);
}

TEST(StreamKSchedule, OffWhereItCannotHelp) {
  EXPECT_EQ(portable::stream_k_schedule(264, 36, 132, kMaxStages).sharing_ctas, 0);  // 2 rounds
  // 3×3 C128 28×28 fprop: 392 tiles of 18 stages fill three rounds to 99 %.
  EXPECT_EQ(portable::stream_k_schedule(392, 18, 132, kMaxStages).sharing_ctas, 0);
  EXPECT_EQ(portable::stream_k_schedule(100, 513, 132, kMaxStages).sharing_ctas, 0);  // int32
  EXPECT_EQ(portable::stream_k_schedule(100, 3, 132, kMaxStages).sharing_ctas, 0);    // shallow
  EXPECT_EQ(portable::stream_k_schedule(0, 36, 132, kMaxStages).sharing_ctas, 0);
  // Few leftover stages: fewer CTAs share them, each at least the minimum.
  const portable::StreamKSchedule s = portable::stream_k_schedule(133, 8, 132, kMaxStages);
  EXPECT_EQ(s.first_shared_tile, 132);
  EXPECT_EQ(s.sharing_ctas, 8 / portable::kStreamKMinStagesPerCta);
}

}  // namespace
