// The warp-specialised shallow kernel (sm_90a): the int16 form of gemm_shallow.cuh's persistent
// implicit GEMM (1×1 fprop and bprop of flex16 activations, K of one to four 64-deep stages)
// with its work divided by role instead of done in lockstep.
//
// Why: the lockstep kernel runs every instruction in all 256 threads, with a CTA barrier per
// stage. Measured on the H200 (1x1 C64 K256 56x56 fprop): 41 % issue, about 40 % of the
// instructions outside the epilogue (gather, split, wgmma set-up), and the epilogue's rounding
// short of registers beside the 192 accumulators (fixed-latency waits 1.46 per instruction).
//
// Roles (a producer warpgroup and two or three consumer warpgroups):
// - the producer (warpgroup 0, few registers through setmaxnreg) walks the CTA's B stages: its
//   cp.async gathers R − 1 stages ahead into a raw ring; once a stage has landed it splits it
//   into a free plane slot and announces it on the slot's `full` barrier. Its 128 threads take
//   the copies and splits that 256 threads take in the lockstep kernel (each thread also does
//   those of thread t + 128: the same column chunk, k-rows 32 further, and warp w + 4's split);
// - the consumers (the registers the producer gave up) wait for a plane slot, run the wgmmas of
//   their unit, give the slot back on its `empty` barrier once they have read it, and round and
//   store the unit. Nothing makes the consumers wait for each other: each has its own staging
//   rows, statistics and place in the CTA's tiles.
// - A column tile is cut into units of 64 rows (a wgmma's M) × kUnitN columns: two row halves
//   where the tile row has more than 64 rows, else one, times the column parts. Unit u of the
//   CTA (counted over its tiles) belongs to consumer u mod consumers, so that no warpgroup
//   multiplies rows past the matrix (the lockstep kernel's second warpgroup did, for m ≤ 64).
// - Two consumers on 64 × 128 units where the matrix has more than 64 rows: each reads every B
//   stage with its row half of A. Three consumers on 64 × 64 units where it has at most 64: a
//   tile's two units go to two of them in turn, and three warps per scheduler share the
//   epilogue. (Three on 64 × 64 units of a 128-row tile measured slower: the wgmmas read A's
//   planes twice as often.)
// - Where B is a plain matrix (1×1 filters at stride 1 without padding, the positions one unit
//   stride, a multiple of 16 channels), one producer thread loads each stage by two bulk tensor
//   copies instead (BoxS16Split's layout), and the producer's 128 threads only split. Nsight
//   Compute on the H200 (1x1 C256 K64 56x56 fprop, four stages, three consumers) had shown the
//   consumers waiting for full stages 40 % of their time while the producer issued 213
//   instructions a stage at 0.18 a cycle (the gather's addresses and copies, half of them);
//   with bulk loads, 107 a stage. Measured against the gathering producer, same run, ms: C256
//   K64 fprop 0.048 → 0.044, C64 K256 bprop 0.048 → 0.044, C64 K256 fprop 0.0576 → 0.0545,
//   C256 K64 bprop 0.056 → 0.054, C256 K1024 14x14 fprop 0.0386 → 0.0360.
// A's stages are loaded and split in place once, before the roles part, as in the lockstep kernel.
// The consumers' stores go through their warp's staging by stmatrix (one instruction per four
// packed words instead of four 32-bit stores): boxes that lane 0 hands to the TMA unit as bulk
// tensor stores (all but the one-stage two-consumer kernel), or padded rows that the warp reads
// back and stores itself.
//
// Measured on the H200 against the lockstep kernel (FLEXKIT_CONV_KERNEL=lockstep), same build,
// alternating, ms, with two consumers for every layer: 1x1 56x56 C64 K256 fprop 0.067 → 0.056 and
// bprop (m 64, four stages) 0.063 → 0.056; C256 K64 fprop (four stages) 0.063 → 0.056 and bprop
// 0.065 → 0.055. Three consumers with streaming stores then took the two m-64 layers to 0.051.
#pragma once
#include <cstdint>

#include "backend/cuda/gemm/conv_gather.cuh"
#include "backend/cuda/gemm/gemm_shallow.cuh"
#include "backend/cuda/gemm/tma_pipeline.cuh"

namespace flexkit::backend::cuda::gemm_kernels {
namespace wgmma_detail {

inline constexpr int kSpecializedPlaneSlots = 4;  // a power of two: slot and phase by shifts

// The consumers' count sets their wgmma unit: two consumer warpgroups on units of 64 rows × 128
// columns (192 accumulators), or three on 64 × 64 (96), with fewer registers each.
__host__ __device__ constexpr int specialized_unit_n(int consumers) {
  return consumers == 2 ? 128 : 64;
}
__host__ __device__ constexpr int specialized_threads(int consumers) {
  return (1 + consumers) * 128;
}
// Registers per thread of each role. The launch gives every thread 65 536 / threads, rounded
// down to a multiple of 8 (168 for 384 threads, 128 for 512), and setmaxnreg only moves registers
// within the CTA's pool: producer + consumers · consumer = (1 + consumers) · launch. Spills
// (ptxas): none at 56 / 152 (three consumers); with two, none in the one-stage kernels at
// 56 / 224 and about 65 bytes in the four-stage ones at 40 / 232.
__host__ __device__ constexpr int specialized_launch_registers(int consumers) {
  return 65536 / specialized_threads(consumers) / 8 * 8;
}
__host__ __device__ constexpr int producer_registers(int consumers, int a_stages) {
  return consumers == 2 && a_stages > 1 ? 40 : 56;
}
__host__ __device__ constexpr int consumer_registers(int consumers, int a_stages) {
  return ((1 + consumers) * specialized_launch_registers(consumers) -
          producer_registers(consumers, a_stages)) /
         consumers;
}
__host__ __device__ constexpr bool registers_add_up(int consumers, int a_stages) {
  return producer_registers(consumers, a_stages) +
                 consumers * consumer_registers(consumers, a_stages) ==
             (1 + consumers) * specialized_launch_registers(consumers) &&
         consumer_registers(consumers, a_stages) % 8 == 0;
}
static_assert(registers_add_up(2, 1) && registers_add_up(2, kShallowMaxStages) &&
              registers_add_up(3, 1) && registers_add_up(3, kShallowMaxStages));

// Whether the consumers store the output through bulk tensor stores (boxes staged in shared
// memory, written by the TMA unit) or by 16-byte stores of their own from padded staging rows.
__host__ __device__ constexpr bool specialized_bulk_stores(int consumers, int a_stages) {
  return !(consumers == 2 && a_stages == 1);
}
// Each consumer warp's staging: for bulk stores, a box of 16 rows × 64 int16 columns (128 bytes,
// the 128-byte swizzle's span, 1024-byte aligned) per 64 columns of its unit; else 16 rows of 64
// columns padded to 144 bytes.
inline constexpr int kStoreBoxColumns = 64;
inline constexpr int kStoreBoxBytes = 16 * kStoreBoxColumns * 2;
__host__ __device__ constexpr int specialized_warp_staging_bytes(int consumers, int a_stages) {
  return specialized_bulk_stores(consumers, a_stages)
             ? specialized_unit_n(consumers) / kStoreBoxColumns * kStoreBoxBytes
             : 16 * kShallowStagePitch;
}
__host__ __device__ constexpr int specialized_stage_bytes(int consumers, int a_stages) {
  return consumers * 4 * specialized_warp_staging_bytes(consumers, a_stages);
}
inline constexpr int kRingBarrierBytes = 2 * kSpecializedPlaneSlots * 8;  // full and empty
__host__ __device__ constexpr int specialized_raw_slots(int a_stages) {
  return a_stages == 1 ? 7 : 4;
}
__host__ __device__ constexpr int specialized_smem_bytes(int consumers, int a_stages) {
  return a_stages * kShallowAStageBytes + specialized_raw_slots(a_stages) * kRawS16Bytes +
         kSpecializedPlaneSlots * 2 * kPlaneBytes + specialized_stage_bytes(consumers, a_stages) +
         (specialized_bulk_stores(consumers, a_stages) ? 0 : kRingBarrierBytes) + kAlignSlack;
}
// The raw slots' barriers of B's bulk tensor loads (static shared memory, as many as slots).
inline constexpr int kRawBarrierBytes = 7 * 8;
static_assert(specialized_raw_slots(1) <= 7 && specialized_raw_slots(kShallowMaxStages) <= 7);
// The opt-in limit per block (227 KB) less this kernel's static shared memory: commit_block_stats'
// 1.5 KB, the raw slots' barriers and, with bulk stores, the ring's barriers. (kSmemLimit keeps
// 2 KB; the two-consumer kernels with bulk stores need 120 bytes more than that leaves.)
inline constexpr int kSpecializedSmemLimit =
    227 * 1024 - 1536 - kRingBarrierBytes - kRawBarrierBytes;
static_assert(specialized_smem_bytes(2, 1) <= kSpecializedSmemLimit &&
                  specialized_smem_bytes(2, kShallowMaxStages) <= kSpecializedSmemLimit &&
                  specialized_smem_bytes(3, 1) <= kSpecializedSmemLimit &&
                  specialized_smem_bytes(3, kShallowMaxStages) <= kSpecializedSmemLimit,
              "over the sm_90 shared-memory limit per block");

// B's stage as two bulk tensor loads (where B is a plain matrix: 1×1 filters at stride 1 without
// padding, the positions one unit stride): a 4-D map of k-row k = 16·q + 2·h + b and 64 columns
// per box, dimensions (column, b, q, h), so that box row R = b + 2·q + 8·h. Under the 128-byte
// swizzle, 16-byte chunk c of row R lies at R·128 + 16·(c ^ (R % 8)); columns 64 … 127 are the
// second box, 8 KB on. The split's ldmatrix lane (matrix i = lane / 8, r = lane % 8) reads k-row
// 16·(r / 2) + 8·l + 2·i + r % 2 of load l, which is box row lane + 32·l: the eight rows of a
// matrix have eight different R % 8, so the reads are free of bank conflicts, and the registers
// hold what LeanS16RowContigSplit::load reads from the cp.async layout.
struct BoxS16Split {
  uint32_t raw_offset;  // this lane's ldmatrix row in chunk w of the first box, load 0

  __device__ __forceinline__ void init(int w, int lane) {
    raw_offset = lane * 128 + 16 * (w ^ (lane & 7));
  }
  __device__ __forceinline__ void load(uint32_t raw, LeanS16RowContigSplit::Regs& r) const {
    const uint32_t from = raw + raw_offset;
#pragma unroll
    for (int c = 0; c < 2; ++c) {
#pragma unroll
      for (int l = 0; l < 2; ++l) ldsm_x4_trans(from + 8192 * c + 4096 * l, r.v[c][l]);
    }
  }
};
static_assert(kRawS16Bytes == 2 * 8192, "two boxes of 64 k-rows × 64 columns a stage");

// B stage s of the CTA (its tile s / stages, stage s % stages of that tile) takes plane slot
// s mod 4, as phase s / 4 of the slot's barriers. Every consumer waits for every stage in order
// and gives every stage back, also the stages of tiles in which it owns no unit: then no stage
// can be refilled before each consumer has seen it full, so a consumer is never more than one
// phase ahead of a slot's barrier, which a parity wait could not tell apart (phase k + 2 of a
// slot has the parity of phase k).
__device__ __forceinline__ int plane_slot(int stage) {
  return stage & (kSpecializedPlaneSlots - 1);
}
__device__ __forceinline__ uint32_t plane_parity(int stage) {
  return static_cast<uint32_t>(stage >> 2) & 1u;
}
static_assert(kSpecializedPlaneSlots == 4, "plane_parity's shift");

// A consumer's walk over the CTA's tiles: unit u = tile · units + j of the CTA belongs to
// consumer u mod kConsumers (one or two units of a tile, or none); every stage of a tile in which
// it owns no unit is still waited for and given back (see plane_slot).
template <int kConsumers, typename RunUnit, typename WaitFull, typename Release>
__device__ __forceinline__ void run_consumer_tiles(int tile_count, int stages, int units,
                                                   int consumer, const RunUnit& run_unit,
                                                   const WaitFull& wait_full,
                                                   const Release& release) {
  int rotation = 0;  // (tile · units) mod kConsumers: the owner of the tile's unit 0
#pragma unroll 1
  for (int tile = 0; tile < tile_count; ++tile) {
    const int j0 = (consumer - rotation + kConsumers) % kConsumers;
    rotation = (rotation + units) % kConsumers;
    if (j0 >= units) {
#pragma unroll 1
      for (int si = 0; si < stages; ++si) {
        wait_full(tile * stages + si);
        release(tile * stages + si);
      }
      continue;
    }
#pragma unroll 1
    for (int j = j0; j < units; j += kConsumers)
      run_unit(tile, j, j == j0, j + kConsumers >= units);
  }
}

// The descriptors of a stage's wgmmas, formed before the wait for the stage (with them formed
// between the wgmmas, ptxas moved each to the uniform registers just before its wgmma).
struct StageDescriptors {
  uint64_t a_hi[2], a_lo[2], b_hi[2], b_lo[2];  // per k-step
};

// A consumer warpgroup (`consumer` of kConsumers): per unit of its (run_unit: unit j of tile
// `tile`, rows 64·(j / kColumnUnits) …, columns kUnitN·(j % kColumnUnits) … of the tile) the
// stages' wgmmas, waiting for each stage to be full where `first_use` (its second unit of a tile
// reads stages it has already waited for) and giving each back once read where `last_use`; then
// the unit's epilogue. Its stores go through the warp's staging by stmatrix: boxes that lane 0
// hands to the TMA unit (`mapped`), or padded rows the warp reads back (`staged`): lane t
// addresses row t % 8 (+ 8 for the odd matrices) of the pair's first column block (+ 16 bytes,
// in boxes + 1 16-byte block, for matrices 2 and 3); in a box, block b of row r is stored at
// block b ^ (r % 8) (the map's 128-byte swizzle; the boxes are 1024-byte aligned), so pair jp's
// address is stsm_row + ((32·jp) ^ stsm_swizzle). Those paths' stmatrix and __syncwarp need the
// whole warp: their conditions must not depend on the lane (for the padded rows, all 16 of the
// warp's rows inside, not each lane's two). Only lane 0 of each warp issues, commits and waits
// for the warp's bulk stores.
template <int kAStages, int kConsumers>
__device__ __forceinline__ void run_specialized_consumer(
    const IntegerGemmArgs& p, const CUtensorMap& c_map, int c_map_ok, uint32_t smem_address,
    uint32_t a_region, uint32_t b_planes, uint32_t staging_region, uint32_t full_barriers,
    uint32_t empty_barriers, int stages, int ctas_per_row, int first_n, int tile_count,
    int64_t row0, int rows_a, int units, int consumer) {
  constexpr uint32_t kStagePlaneBytes = 2 * kPlaneBytes;
  constexpr int kUnitN = specialized_unit_n(kConsumers);
  constexpr int kColumnUnits = kWgmmaTileN / kUnitN;
  constexpr int kAccumulators = kUnitN / 2;
  constexpr bool kBulkStores = specialized_bulk_stores(kConsumers, kAStages);

  const uint64_t desc0 = wgmma::descriptor(smem_address);
  const uint32_t desc_hi = static_cast<uint32_t>(desc0 >> 32);
  const uint32_t desc_lo = static_cast<uint32_t>(desc0);
  const uint32_t d_a = desc_lo + ((a_region - smem_address) >> 4);
  const uint32_t d_b = desc_lo + ((b_planes - smem_address) >> 4);
  auto desc = [&](uint32_t lo) { return uint64_t(lo) | (uint64_t(desc_hi) << 32); };

  const int warp_in_group = (threadIdx.x >> 5) & 3;
  const int lane = threadIdx.x & 31;
  const int64_t rs = p.c.row_stride;
  const bool mapped = kBulkStores && c_map_ok != 0;
  const bool staged =
      !kBulkStores && rs % 8 == 0 && reinterpret_cast<uintptr_t>(p.c.data) % 16 == 0;
  const uint32_t staging =
      staging_region +
      (4 * consumer + warp_in_group) * specialized_warp_staging_bytes(kConsumers, kAStages);
  const uint32_t stsm_at =
      staging + ((lane & 7) + 8 * ((lane >> 3) & 1)) * kShallowStagePitch + 16 * (lane >> 4);
  const uint32_t stsm_row = staging + ((lane & 7) + 8 * ((lane >> 3) & 1)) * 128;
  const uint32_t stsm_swizzle = 16 * ((lane >> 4) ^ (lane & 7));
  const uint64_t store_policy = kBulkStores ? tma::evict_first_policy() : 0;
  const int32_t scale = p.epilogue.scale;
  const portable::ByteProductRounding rounding = lane_varying_rounding(scale);
  // Past the matrix: products of zero fill (0), so starting both extremes at 0 moves nothing.
  int32_t stat_max = 0, stat_min = 0;
  uint32_t stat_saturated = 0;

  uint32_t acc_hi[kAccumulators] = {}, acc_mid[kAccumulators] = {}, acc_lo[kAccumulators] = {};
  // acc_mid and acc_lo hold H and L of each value once the epilogue has combined them (below).
  auto rounded = [&](int i) {
    return portable::gemm_round_combined_byte_products({acc_mid[i], acc_lo[i]}, rounding);
  };
  auto wait_full = [&](int stage) {
    tma::wait(full_barriers + 8 * plane_slot(stage), plane_parity(stage));
  };
  auto release = [&](int stage) {
    if (lane == 0) tma::arrive(empty_barriers + 8 * plane_slot(stage));
  };

  auto descriptors = [&](int si, int stage, uint32_t a_unit, uint32_t b_unit) {
    StageDescriptors d;
    const uint32_t plane_offset = plane_slot(stage) * kStagePlaneBytes;
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) {
      const uint32_t a_step = (si * kShallowAStageBytes + 32 * ks) >> 4;
      const uint32_t b_step = (plane_offset + 32 * ks) >> 4;
      d.a_hi[ks] = desc(a_unit + a_step);
      d.a_lo[ks] = desc(a_unit + a_step + (kPlaneBytes >> 4));
      d.b_hi[ks] = desc(b_unit + b_step);
      d.b_lo[ks] = desc(b_unit + b_step + (kPlaneBytes >> 4));
    }
    return d;
  };
  // One stage of a unit's wgmmas (the tile's first stage written, not accumulated: `fresh`).
  auto k_steps = [&](auto fresh, const StageDescriptors& d) {
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) {
      const uint64_t a_hi = d.a_hi[ks], a_lo = d.a_lo[ks], b_hi = d.b_hi[ks], b_lo = d.b_lo[ks];
      if (decltype(fresh)::value && ks == 0) {
        wgmma::byte_products<true>(acc_hi, acc_mid, acc_lo, a_hi, a_lo, b_hi, b_lo);
      } else {
        wgmma::byte_products<false>(acc_hi, acc_mid, acc_lo, a_hi, a_lo, b_hi, b_lo);
      }
    }
  };

  auto run_unit = [&](int tile, int j, bool first_use, bool last_use) {
    const int row_half = j / kColumnUnits, col_unit = j % kColumnUnits;
    const uint32_t a_unit = d_a + ((row_half * 64 * wgmma::kRowBytes) >> 4);
    const uint32_t b_unit = d_b + ((col_unit * kUnitN * wgmma::kRowBytes) >> 4);
    const int first_stage = tile * stages;
    {
      const StageDescriptors d = descriptors(0, first_stage, a_unit, b_unit);
      if (first_use) wait_full(first_stage);
      wgmma::fence();
      k_steps(std::true_type{}, d);
    }
    wgmma::commit_group();
#pragma unroll 1
    for (int si = 1; si < stages; ++si) {
      const StageDescriptors d = descriptors(si, first_stage + si, a_unit, b_unit);
      if (first_use) wait_full(first_stage + si);
      wgmma::fence();
      k_steps(std::false_type{}, d);
      wgmma::commit_group();
      wgmma::wait_group<1>();
      if (last_use) release(first_stage + si - 1);
    }
    wgmma::wait_group<0>();
    if (last_use) release(first_stage + stages - 1);
    wgmma::pin_registers(acc_hi);
    wgmma::pin_registers(acc_mid);
    wgmma::pin_registers(acc_lo);

    // H and L of every value first, in place, which frees acc_hi's registers for the rounding's
    // values in flight.
    combine_byte_products_in_place(acc_hi, acc_mid, acc_lo, rounding);
    const int warp_row = 64 * row_half + 16 * warp_in_group;  // in the tile row
    const int row = warp_row + (lane >> 2);
    const bool row_ok0 = row < rows_a, row_ok1 = row + 8 < rows_a;
    const int64_t col0 = int64_t(first_n + tile * ctas_per_row) * kWgmmaTileN + kUnitN * col_unit;
    const int64_t cols_left = p.n - col0;
    const int cols =
        static_cast<int>(cols_left < kUnitN ? (cols_left > 0 ? cols_left : 0) : kUnitN);
    uint32_t pair_max = 0x80008000u, pair_min = 0x7fff7fffu;
    // Pair jp of the columns' half `half` (two column blocks of 8, rows r and r + 8): four packed
    // words, their extremes kept, into the warp's staging by one stmatrix at `address`.
    auto stage_pair = [&](int half, int jp, uint32_t address) {
      uint32_t w[4];
      pack_block_pair(rounded, 8 * half + 2 * jp, w, pair_max, pair_min);
      stsm_x4(address, w[0], w[1], w[2], w[3]);
    };
    if (mapped) {
      // Through the warp's staging boxes, 64 columns at a time: a stmatrix per two column blocks
      // (four packed words), then one bulk tensor store of the 16 × 64 box by lane 0. The map
      // leaves out what lies past the matrix (rows past m, columns past n), whose values are
      // products of zero fill. The boxes are free again once the previous unit's stores have
      // read them, long issued by now.
      if (lane == 0) tma::store_wait_read<0>();
      __syncwarp();
#pragma unroll
      for (int half = 0; half < kUnitN / 64; ++half) {
        const uint32_t box = staging + half * kStoreBoxBytes;
#pragma unroll
        for (int jp = 0; jp < 4; ++jp)
          stage_pair(half, jp, stsm_row + half * kStoreBoxBytes + ((32 * jp) ^ stsm_swizzle));
        wgmma::fence_proxy_async_shared();
        __syncwarp();
        if (lane == 0 && cols > 64 * half && warp_row < rows_a) {
          const int32_t c0 = static_cast<int32_t>(col0 + 64 * half);
          const int32_t r0 = static_cast<int32_t>(row0 + warp_row);
          tma::store_2d_hinted(&c_map, c0, r0, box, store_policy);
        }
      }
      if (lane == 0) tma::store_commit();
    } else if (staged && warp_row + 16 <= rows_a && cols == kUnitN) {
      // Through the warp's padded staging rows, 64 columns at a time: a stmatrix per two column
      // blocks (four packed words), then 16-byte reads and stores of whole 128-byte row segments.
      int16_t* const warp_out = static_cast<int16_t*>(p.c.data) + (row0 + warp_row) * rs + col0;
#pragma unroll
      for (int half = 0; half < kUnitN / 64; ++half) {
#pragma unroll
        for (int jp = 0; jp < 4; ++jp) stage_pair(half, jp, stsm_at + 32 * jp);
        store_staged_rows(staging, warp_out, rs, half, lane);
      }
    } else {
      int16_t* const out0 =
          static_cast<int16_t*>(p.c.data) + (row0 + row) * rs + col0 + 2 * (lane & 3);
#pragma unroll
      for (int j = 0; j < kUnitN / 8; ++j) {
        if (8 * j + 2 * (lane & 3) >= cols) continue;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          if (!(r ? row_ok1 : row_ok0)) continue;
          const uint32_t packed =
              pack_saturated(rounded(4 * j + 2 * r), rounded(4 * j + 2 * r + 1));
          pair_max = __vimax3_s16x2(pair_max, packed, packed);
          pair_min = __vimin3_s16x2(pair_min, packed, packed);
          *reinterpret_cast<uint32_t*>(out0 + 8 * r * rs + 8 * j) = packed;
        }
      }
    }
    const int32_t tile_max = pair_max_value(pair_max);
    const int32_t tile_min = pair_min_value(pair_min);
    if (tile_max == portable::kFlex16MaxM || tile_min == portable::kFlex16MinM)
      count_clamped<kAccumulators>(stat_saturated, rounded, lane, cols, row_ok0, row_ok1);
    stat_max = max(stat_max, tile_max);
    stat_min = min(stat_min, tile_min);
  };

  run_consumer_tiles<kConsumers>(tile_count, stages, units, consumer, run_unit, wait_full, release);

  // The last stores must have read their boxes before the CTA's shared memory goes.
  if (kBulkStores && lane == 0) tma::store_wait<0>();
  commit_block_stats(stored_stats(stat_max, stat_min, stat_saturated), p.stats, p.stats_host,
                     p.stats_arrivals);
}

// The producer where B is a plain matrix: thread 0 issues a stage's two boxes on its raw slot's
// barrier, R − 1 stages ahead; every thread waits for the stage, then splits it into its plane
// slot (BoxS16Split's reads, warps w and w + 4 of the 256-thread split per warp).
template <int kAStages>
__device__ __forceinline__ void run_bulk_producer(const CUtensorMap& b_map, uint32_t b_raw,
                                                  uint32_t b_planes, uint32_t raw_full,
                                                  uint32_t full_barriers, uint32_t empty_barriers,
                                                  int total, int stages, int first_n,
                                                  int ctas_per_row) {
  constexpr int kSlots = specialized_raw_slots(kAStages);
  constexpr uint32_t kStagePlaneBytes = 2 * kPlaneBytes;
  // B by bulk tensor loads: thread 0 issues a stage's two boxes on its raw slot's barrier,
  // R − 1 stages ahead; every thread waits for the stage, then splits it as below.
  const bool issuer = threadIdx.x == 0;
  if (issuer) tma::prefetch_map(&b_map);
  int issue_tile = 0, issue_stage = 0, issued = 0;
  uint32_t issue_slot = 0;
  auto issue_next = [&] {
    if (issuer && issued < total) {
      const int32_t col0 = (first_n + issue_tile * ctas_per_row) * kWgmmaTileN;
      const uint32_t dst = b_raw + issue_slot * kRawS16Bytes;
      const uint32_t barrier = raw_full + 8 * issue_slot;
      tma::arrive_expect_bytes(barrier, kRawS16Bytes);
      tma::load_4d(dst, &b_map, col0, 0, 4 * issue_stage, 0, barrier);
      tma::load_4d(dst + kRawS16Bytes / 2, &b_map, col0 + 64, 0, 4 * issue_stage, 0, barrier);
    }
    if (++issue_stage == stages) {
      issue_stage = 0;
      ++issue_tile;
    }
    ++issued;
    issue_slot = issue_slot + 1 == kSlots ? 0u : issue_slot + 1;
  };
  for (int i = 0; i < kSlots - 1; ++i) issue_next();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  BoxS16Split box_low, box_high;  // warps w and w + 4 of the 256-thread split
  box_low.init(warp, lane);
  box_high.init(warp + 4, lane);
  LeanS16RowContigSplit split_low, split_high;  // their plane offsets
  split_low.plane_offset =
      wgmma::swizzle((8 * warp + (lane >> 2)) * wgmma::kRowBytes + 16 * (lane & 3));
  split_high.plane_offset =
      wgmma::swizzle((8 * (warp + 4) + (lane >> 2)) * wgmma::kRowBytes + 16 * (lane & 3));
  uint32_t split_slot = 0, split_parity = 0;
#pragma unroll 1
  for (int s = 0; s < total; ++s) {
    tma::wait(raw_full + 8 * split_slot, split_parity);
    // Every producer thread has split stage s − 1, whose raw slot the next loads reuse.
    named_barrier_sync(1, 128);
    issue_next();
    const int plane = plane_slot(s);
    if (s >= kSpecializedPlaneSlots) tma::wait(empty_barriers + 8 * plane, plane_parity(s) ^ 1u);
    const uint32_t planes = b_planes + plane * kStagePlaneBytes;
    const uint32_t raw = b_raw + split_slot * kRawS16Bytes;
    {
      LeanS16RowContigSplit::Regs r;
      box_low.load(raw, r);
      split_low.store(r, planes);
      box_high.load(raw, r);
      split_high.store(r, planes);
    }
    wgmma::fence_proxy_async_shared();
    tma::arrive(full_barriers + 8 * plane);
    if (++split_slot == kSlots) {
      split_slot = 0;
      split_parity ^= 1u;
    }
  }
}

// The producer where B is gathered: its 128 threads take the copies of 256 (ProducerGather),
// R − 1 stages ahead, and split each landed stage into its plane slot as warps w and w + 4.
template <int kAStages>
__device__ __forceinline__ void run_gather_producer(const IntegerGemmArgs& p, uint32_t b_raw,
                                                    uint32_t b_planes, uint32_t full_barriers,
                                                    uint32_t empty_barriers, int total, int stages,
                                                    int first_n, int ctas_per_row) {
  constexpr int kSlots = specialized_raw_slots(kAStages);
  constexpr uint32_t kStagePlaneBytes = 2 * kPlaneBytes;
  const ConvGather& g = p.gather;
  const int16_t* const b_data = static_cast<const int16_t*>(p.b.data);
  ProducerGather gather;
  TapWalk walk;
  ColumnCursor cursor;
  cursor.init(g, GatherCopy<int16_t>::chunk_column(int64_t(first_n) * kWgmmaTileN),
              int64_t(ctas_per_row) * kWgmmaTileN);
  int issue_stage = 0;
  int issued = 0;
  // The next stage of the CTA into raw slot `slot` (past the end: an empty group).
  auto issue_next = [&](uint32_t slot) {
    if (issued < total) {
      if (issue_stage == 0) {
        int64_t o64[3], n64;
        cursor.position(o64, n64);
        gather.init_at(g, cursor.col, o64, n64, p.n);
        cursor.advance(g);
        walk.init(g, 0);
      }
      gather.issue(b_raw + slot, b_data, g, walk, walk.channels(g));
      walk.advance(g);
      if (++issue_stage == stages) issue_stage = 0;
    }
    ++issued;
    cp_async_commit();
  };
  for (int i = 0; i < kSlots - 1; ++i) issue_next(uint32_t(i) * kRawS16Bytes);

  const int warp = threadIdx.x >> 5;
  LeanS16RowContigSplit split_low, split_high;  // warps w and w + 4 of the 256-thread split
  {
    // LeanS16RowContigSplit::init reads the warp from threadIdx.x: the same arithmetic for a
    // virtual warp.
    const int lane = threadIdx.x & 31;
    const int matrix = lane >> 3, r = lane & 7;
    for (int h = 0; h < 2; ++h) {
      LeanS16RowContigSplit& s = h == 0 ? split_low : split_high;
      const int w = warp + 4 * h;
      s.raw_offset = raw_rowcontig_offset(16 * (r >> 1) + 2 * matrix + (r & 1), w, 256);
      s.plane_offset = wgmma::swizzle((8 * w + (lane >> 2)) * wgmma::kRowBytes + 16 * (lane & 3));
    }
  }
  uint32_t raw_split = 0;                            // raw slot of stage s
  uint32_t raw_issue = (kSlots - 1) * kRawS16Bytes;  // raw slot of stage s + R − 1
#pragma unroll 1
  for (int s = 0; s < total; ++s) {
    // Stage s has landed for every producer thread, and all of them have split stage s − 1
    // (whose raw slot the next copies reuse).
    cp_async_wait<kSlots - 2>();
    named_barrier_sync(1, 128);
    issue_next(raw_issue);
    raw_issue = raw_split;
    // The slot is free once every consumer has given back the stage four before this one.
    const int plane = plane_slot(s);
    if (s >= kSpecializedPlaneSlots) tma::wait(empty_barriers + 8 * plane, plane_parity(s) ^ 1u);
    const uint32_t planes = b_planes + plane * kStagePlaneBytes;
    {
      // One virtual warp after the other: 16 registers of raw words at a time.
      LeanS16RowContigSplit::Regs r;
      split_low.load(b_raw + raw_split, r);
      split_low.store(r, planes);
      split_high.load(b_raw + raw_split, r);
      split_high.store(r, planes);
    }
    wgmma::fence_proxy_async_shared();
    tma::arrive(full_barriers + 8 * plane);
    raw_split = raw_split + kRawS16Bytes == kSlots * kRawS16Bytes ? 0u : raw_split + kRawS16Bytes;
  }
}

// `c_map`: the output as a 2-D map of int16 (columns innermost), boxes of 64 columns × 16 rows,
// 128-byte swizzle; `c_map_ok` = 0 where the output cannot be mapped (its row stride not a
// multiple of 16 bytes, say), and the consumers then store words from their registers.
// `b_map`: B as the 4-D map of BoxS16Split where B is a plain matrix (`b_map_ok` = 1); else the
// producer gathers B by cp.async.
template <bool kAKContig, int kAStages, int kConsumers>
__global__ void __launch_bounds__(specialized_threads(kConsumers), 1)
    gemm_shallow_specialized_kernel(const __grid_constant__ IntegerGemmArgs p,
                                    const __grid_constant__ CUtensorMap c_map, int c_map_ok,
                                    const __grid_constant__ CUtensorMap b_map, int b_map_ok) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kSlots = specialized_raw_slots(kAStages);
  constexpr int kPlanes = kSpecializedPlaneSlots;
  constexpr uint32_t kStagePlaneBytes = 2 * kPlaneBytes;
  constexpr int kUnitN = specialized_unit_n(kConsumers);
  constexpr int kColumnUnits = kWgmmaTileN / kUnitN;
  // Bulk tensor stores, their lines marked evict-first in L2 (the output is written once and
  // never read here: it should not push B out), for every kernel but the one-stage one with two
  // consumers. Measured on the H200 against the consumers' own 16-byte stores, same run, ms:
  // - three consumers (1x1 56x56 C256 K64 fprop, C64 K256 bprop; st.global.cs before): 0.051 →
  //   0.047–0.048, 0.051–0.052 → 0.048–0.049;
  // - two consumers, two stages (1x1 28x28 C128 K512 fprop, C512 K128 bprop): 0.044 → 0.040–0.041
  //   (0.041–0.042 without the evict-first policy);
  // - two consumers, one stage (1x1 56x56 C64 K256 fprop, C256 K64 bprop): 0.057 → 0.059–0.061,
  //   so that kernel keeps its own stores (plain: st.global.cs measured 0.001 slower there).
  constexpr bool kBulkStores = specialized_bulk_stores(kConsumers, kAStages);

  extern __shared__ unsigned char smem_raw[];
  // The ring's barriers: in static shared memory where the bulk stores' boxes leave no room in
  // the dynamic part. (Measured on the H200 with them at the dynamic part's end there: 1x1 C128
  // K512 28x28 fprop and C512 K128 bprop 0.041–0.042 → 0.043–0.044 ms, with more spills. The
  // kernel without bulk stores keeps them at the end, where it measured fastest.)
  __shared__ uint64_t static_barriers[kBulkStores ? 2 * kSpecializedPlaneSlots : 1];
  __shared__ uint64_t raw_barriers[kSlots];  // B's raw slots, where they are bulk-loaded
  const uint32_t smem_address = aligned_shared_address(smem_raw);
  const uint32_t a_region = smem_address;  // stage s at + s · 16 KB: high plane, then low
  const uint32_t b_raw = a_region + kAStages * kShallowAStageBytes;
  const uint32_t b_planes = b_raw + kSlots * kRawS16Bytes;
  const uint32_t staging_region = b_planes + kPlanes * kStagePlaneBytes;
  const uint32_t full_barriers =
      kBulkStores ? tma::shared_address(static_barriers)
                  : staging_region + specialized_stage_bytes(kConsumers, kAStages);
  const uint32_t empty_barriers = full_barriers + 8 * kPlanes;

  const int stages = kAStages == 1 ? 1 : static_cast<int>(p.k / kWgmmaStageK);
  const int tiles_m = p.tiles_m;
  const int tile_m = static_cast<int>(blockIdx.x) % tiles_m;
  const int ctas_per_row = static_cast<int>(gridDim.x) / tiles_m;
  const int first_n = static_cast<int>(blockIdx.x) / tiles_m;
  if (first_n >= p.tiles_n) {  // not launched so (ctas_per_row ≤ tiles_n), but counted if it were
    wait_for_prerequisite_grid();
    commit_block_stats(portable::gemm_stats_identity(), p.stats, p.stats_host, p.stats_arrivals);
    return;
  }
  const int tile_count = (p.tiles_n - first_n + ctas_per_row - 1) / ctas_per_row;
  const int total = tile_count * stages;
  const int64_t row0 = int64_t(tile_m) * kWgmmaTileM;
  const int rows_a = static_cast<int>(p.m - row0 < kWgmmaTileM ? p.m - row0 : kWgmmaTileM);
  // A column tile's units (64 rows × kUnitN columns, a consumer's wgmma tile): row halves (two
  // where the tile row has more than 64 rows, else one) times column parts.
  const int units = (rows_a > 64 ? 2 : 1) * kColumnUnits;

  const bool b_mapped = b_map_ok != 0;
  const uint32_t raw_full = tma::shared_address(raw_barriers);
  if (threadIdx.x == 0) {
    for (int s = 0; s < kPlanes; ++s) {
      tma::barrier_init(full_barriers + 8 * s, 128);              // every producer thread
      tma::barrier_init(empty_barriers + 8 * s, 4 * kConsumers);  // a lane per consumer warp
    }
    if (b_mapped) {
      for (int s = 0; s < kSlots; ++s) tma::barrier_init(raw_full + 8 * s, 1);  // the issuer
      tma::barrier_init_fence();
    }
  }
  // Launched as a programmatic dependent (dependent_launch.cuh): nothing above touched global
  // memory, everything below may read what the grid before wrote, or write what it reads.
  wait_for_prerequisite_grid();
  // A: every stage of the tile row, copied raw and split in place by the first 256 threads (the
  // lockstep kernel's mappings).
  if (threadIdx.x < kWgmmaThreads) {
    copy_a_stages<kAKContig>(p, a_region, row0, rows_a, stages);
    cp_async_commit();
    cp_async_wait<0>();
  }
  __syncthreads();
  split_a_blocks_in_place<kAKContig>(a_region, stages);

  // Broadcast from lane 0, so that the compiler knows it is the same in the whole warp: the
  // consumers' wgmma descriptors, formed from it per unit, then stay in uniform registers.
  const int warpgroup = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x >> 7), 0);
  if (warpgroup == 0) {
    // ---------------------------------------------------------------- the producer
    lower_registers<producer_registers(kConsumers, kAStages)>();
    if (b_mapped) {
      run_bulk_producer<kAStages>(b_map, b_raw, b_planes, raw_full, full_barriers, empty_barriers,
                                  total, stages, first_n, ctas_per_row);
      commit_block_stats(portable::gemm_stats_identity(), p.stats, p.stats_host, p.stats_arrivals);
      return;
    }
    run_gather_producer<kAStages>(p, b_raw, b_planes, full_barriers, empty_barriers, total, stages,
                                  first_n, ctas_per_row);
    cp_async_wait<0>();
    commit_block_stats(portable::gemm_stats_identity(), p.stats, p.stats_host, p.stats_arrivals);
    return;
  }

  raise_registers<consumer_registers(kConsumers, kAStages)>();
  run_specialized_consumer<kAStages, kConsumers>(p, c_map, c_map_ok, smem_address, a_region,
                                                 b_planes, staging_region, full_barriers,
                                                 empty_barriers, stages, ctas_per_row, first_n,
                                                 tile_count, row0, rows_a, units, warpgroup - 1);
#elif defined(__CUDA_ARCH__)
  __trap();  // the PTX fallback: never launched (prepare_shallow_specialized reports false)
#endif
}

template <bool kAKContig, int kAStages, int kConsumers>
void launch_specialized_one(dim3 grid, const IntegerGemmArgs& args, const CUtensorMap& c_map,
                            bool c_map_ok, const CUtensorMap& b_map, bool b_map_ok,
                            cudaStream_t stream) {
  launch_dependent(true, gemm_shallow_specialized_kernel<kAKContig, kAStages, kConsumers>, grid,
                   dim3(specialized_threads(kConsumers)),
                   specialized_smem_bytes(kConsumers, kAStages), stream, args, c_map,
                   c_map_ok ? 1 : 0, b_map, b_map_ok ? 1 : 0);
}

template <bool kAKContig, int kAStages, int kConsumers>
bool prepare_specialized_one() {
  return prepare_sm90_kernel(gemm_shallow_specialized_kernel<kAKContig, kAStages, kConsumers>,
                             specialized_smem_bytes(kConsumers, kAStages));
}

}  // namespace wgmma_detail
}  // namespace flexkit::backend::cuda::gemm_kernels
