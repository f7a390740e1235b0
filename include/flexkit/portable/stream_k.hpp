// The stream-K schedule's arithmetic, shared by the CUDA kernels and the host (and so testable
// on the CPU): a launch of `tiles` output tiles of `stages` K stages each on one CTA per
// multiprocessor runs whole tiles while every CTA has one (rounds of `ctas` tiles, finished in
// place), then the CTAs share the stages of the tiles left over evenly. Each part of a shared
// tile stores its exact partial sums into a slot of its own (plain stores: int64 atomics into
// one slice per tile measured slower than the imbalance they remove), and a finishing pass adds
// a tile's parts in CTA order.
#pragma once
#include <cstdint>

#include "flexkit/portable/config.hpp"

namespace flexkit::portable {

struct StreamKSchedule {
  int64_t first_shared_tile = 0;  // tiles below it run whole (a multiple of the CTA count)
  int64_t sharing_ctas = 0;       // CTAs 0 … sharing_ctas − 1 share the rest; 0: not stream-K
};

// Parts shorter than this many stages on average are not worth their start (ring fill) and end
// (atomics of a whole tile): fewer CTAs share the leftover tiles then.
inline constexpr int64_t kStreamKMinStagesPerCta = 4;

// Whole rounds of tiles at least this full (in tenths) run as they are: the shared tiles' parts
// cost a workspace write each and a finishing pass, which a nearly full last round does not
// repay (measured on the H200: 3×3 C128 28×28, 392 tiles on 132 CTAs, 99 % full, went from
// 0.104 to 0.16 ms with its last round shared).
inline constexpr int64_t kStreamKFullTenths = 9;

// The schedule for `ctas` CTAs (one per multiprocessor). Not stream-K (sharing_ctas 0) when
// whole rounds of tiles are at least 90 % full, or when one tile is deeper than max_stages (the
// exactness bound of one CTA's int32 accumulators) or shallower than kStreamKMinStagesPerCta.
// (Sharing such deep tiles in parts within the bound measured no faster on 3×3 C128 28×28
// update, 9 tiles of 784 stages, and slower on 1×1 C64 K256 56×56, 2 tiles of 3136: 0.088 →
// 0.117 ms, 132 parts' slots written and read back against the K split's atomics into 2 tiles.)
inline StreamKSchedule stream_k_schedule(int64_t tiles, int64_t stages, int64_t ctas,
                                         int64_t max_stages) {
  StreamKSchedule s;
  if (tiles <= 0 || ctas <= 0 || stages > max_stages || stages < kStreamKMinStagesPerCta) return s;
  const int64_t rounds = (tiles + ctas - 1) / ctas;
  if (tiles * 10 >= rounds * ctas * kStreamKFullTenths) return s;
  s.first_shared_tile = tiles / ctas * ctas;
  const int64_t units = (tiles - s.first_shared_tile) * stages;
  const int64_t sharing = units / kStreamKMinStagesPerCta;
  s.sharing_ctas = sharing < 1 ? 1 : sharing > ctas ? ctas : sharing;
  return s;
}

// Part `index` (0, 1, …) of CTA `cta` among `sharing_ctas` sharing `shared_tiles` tiles of
// `stages` stages: stages [first_stage, end_stage) of shared tile `tile`. False past the CTA's
// last part. CTA c's parts cover the units [c·U/n, (c+1)·U/n) of U = shared_tiles · stages, in
// order, cut at tile boundaries; together the CTAs cover every unit once.
struct StreamKPart {
  int64_t tile, first_stage, end_stage;
};
FLEXKIT_HD bool stream_k_part(int64_t shared_tiles, int64_t stages, int64_t sharing_ctas,
                              int64_t cta, int64_t index, StreamKPart& part) {
  if (cta >= sharing_ctas) return false;
  const int64_t units = shared_tiles * stages;
  const int64_t begin = cta * units / sharing_ctas, end = (cta + 1) * units / sharing_ctas;
  const int64_t tile = begin / stages + index;
  const int64_t first = index == 0 ? begin : tile * stages;
  if (first >= end) return false;
  const int64_t tile_end = (tile + 1) * stages;
  part.tile = tile;
  part.first_stage = first - tile * stages;
  part.end_stage = (end < tile_end ? end : tile_end) - tile * stages;
  return true;
}

// Where the parts are kept: part `index` of CTA c in slot c · parts_per_cta + index, where
// parts_per_cta bounds every CTA's part count (its share of at most ⌈U/n⌉ units starts anywhere
// in a tile).
inline int64_t stream_k_parts_per_cta(int64_t shared_tiles, int64_t stages, int64_t sharing_ctas) {
  const int64_t units = shared_tiles * stages;
  const int64_t share = (units + sharing_ctas - 1) / sharing_ctas;
  return (share + stages - 1) / stages + 1;
}

// The CTA among `sharing_ctas` whose share holds unit u (the largest c with c·U/n ≤ u).
FLEXKIT_HD int64_t stream_k_owner(int64_t units, int64_t sharing_ctas, int64_t u) {
  return ((u + 1) * sharing_ctas - 1) / units;
}

// The parts of shared tile `tile`, for the finish: CTAs first_cta … last_cta, CTA c's part of
// it in slot c · parts_per_cta + (tile − ⌊c·U/n⌋ / stages). Every CTA in between has a part
// (each share holds at least one unit).
struct StreamKTileParts {
  int64_t first_cta, last_cta;
};
FLEXKIT_HD StreamKTileParts stream_k_tile_parts(int64_t shared_tiles, int64_t stages,
                                                int64_t sharing_ctas, int64_t tile) {
  const int64_t units = shared_tiles * stages;
  return {stream_k_owner(units, sharing_ctas, tile * stages),
          stream_k_owner(units, sharing_ctas, (tile + 1) * stages - 1)};
}
FLEXKIT_HD int64_t stream_k_slot(int64_t shared_tiles, int64_t stages, int64_t sharing_ctas,
                                 int64_t parts_per_cta, int64_t cta, int64_t tile) {
  const int64_t begin = cta * (shared_tiles * stages) / sharing_ctas;
  return cta * parts_per_cta + (tile - begin / stages);
}

}  // namespace flexkit::portable
