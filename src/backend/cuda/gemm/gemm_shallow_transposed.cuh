// The transposed shallow kernel (sm_90a): 1×1 fprop and bprop of flex16 activations where the
// output has at most 64 rows (m ≤ 64: C256 K64 fprop, C64 K256 bprop) and B, the activations,
// is a plain matrix (gemm_shallow_specialized.cuh's bulk-load condition). It computes Cᵀ = Bᵀ·Aᵀ:
// 64 positions of B are a wgmma's rows, taken from registers (the RS form), and the filter's
// planes, split once per CTA, are its B operand.
//
// Why: the warp-specialised kernel moves each B stage through a producer that splits it into
// byte planes in shared memory, which the consumers' wgmmas then read, A and B, for every
// 64 × 64 unit. Measured on the H200 (1x1 C256 K64 56x56 fprop): without its epilogue it read B
// at 0.62 of the copy rate, the producer's split chain (ldmatrix → permutes → stores → fence →
// barrier) its critical path; the memory pattern itself moves at 0.86. Here no stage is split
// into shared memory: each consumer reads its own stages with ldmatrix.trans straight into the
// A-fragment layout and splits them with byte permutes in registers, so the stage's bytes cross
// shared memory twice (the bulk load, the ldmatrix) instead of four times (also the planes
// written, then read by the wgmmas), and the consumers' chains run side by side instead of one
// after the other.
//
// Measured on the H200 against the warp-specialised kernel, same process, alternating, ms: 1x1
// 56x56 C256 K64 fprop 0.0440 → 0.0419–0.0427, C64 K256 bprop 0.0442 → 0.0417–0.0423. Diagnostic
// builds (wrong results, timed with the check off) put the rest in memory, not in this kernel's
// work: without its epilogue and stores 0.0345–0.0352, with only the bulk loads and the ring
// (no ldmatrix, no wgmma) 0.0336–0.0342, that is B alone at about 3.0 TB/s; the full kernel moves
// B and C at about the same 3.0 TB/s. Two, three or five raw slots a consumer instead of four
// (0.0440, 0.0433, no change), two stages' boxes a slot (256-byte rows: no change), no L2
// promotion and consumer-major tile order (no change) did not move it.
//
// What did, measured per call with globaltimer stamps (CTAs' start, end of setup, end): the call
// around the kernel and the kernel's own start. A publish kernel behind it cost about 2.5 µs a
// call (the last CTA publishes the record now, exact_stats_commit.cuh), the launch gap 1.6 µs (a
// programmatic dependent launch now); A's setup took about 2 µs before B's first load was issued
// (now B's first stages go out as soon as A's copies have); B's loads mark their lines
// evict-first, so that the filter and the other lines in L2 stay (C64 K256 bprop 0.0384 →
// 0.0374). Together, same process, alternating: C256 K64 fprop 0.0424 → 0.0379–0.0384, C64 K256
// bprop 0.0424 → 0.0372–0.0376; the statistics reduced as the common store's (two fields, not
// six) then took C256 K64 fprop from 0.0377–0.0381 to 0.0371–0.0377. An explicit early trigger of
// the dependent launch measured 1 µs slower, B's first loads issued before A's copies (instead of
// after) 0.5 µs slower.
//
// Roles: three consumer warpgroups and no producer. Each consumer owns whole tiles of 64
// positions × 64 rows (every kConsumers·gridDim.x-th one) and its own ring of raw stages (64
// channels × 64 positions, one bulk tensor load each); thread 0 issues every consumer's first
// kSlots stages during A's setup, then each consumer's thread 0 keeps its ring kSlots stages
// ahead; a named barrier per stage tells that thread when its four warps have read a slot.
// A tile's output goes out through a 64 × 64 staging box (rows of C, 128-byte swizzle) written
// by stmatrix.trans and stored by the TMA unit, two boxes per consumer in turn.
#pragma once
#include <cstdint>
#include <type_traits>

#include "backend/cuda/gemm/gemm_shallow.cuh"
#include "backend/cuda/gemm/tma_pipeline.cuh"

namespace flexkit::backend::cuda::gemm_kernels {
namespace wgmma_detail {

inline constexpr int kTransposedConsumers = 3;
inline constexpr int kTransposedThreads = 128 * kTransposedConsumers;
static_assert(kTransposedThreads >= kWgmmaThreads, "A's split takes 256 threads");
inline constexpr int kTransposedTileN = 64;  // positions per tile: the wgmma's M
inline constexpr int kTransposedSlots = 4;   // raw stages per consumer
inline constexpr int kTransposedBoxes = 2;   // staging boxes per consumer
// A raw stage: 64 channels × 64 positions of int16, as the 5-D box of the kernel's `b_map`.
inline constexpr int kTransposedStageBytes = kWgmmaStageK * kTransposedTileN * 2;
// A staging box: 64 rows of C × 64 positions of int16 (128-byte rows, 128-byte swizzle).
inline constexpr int kTransposedBoxBytes = 64 * kTransposedTileN * 2;
inline constexpr int kTransposedConsumerBytes =
    kTransposedSlots * kTransposedStageBytes + kTransposedBoxes * kTransposedBoxBytes;
__host__ __device__ constexpr int transposed_smem_bytes() {
  return kShallowMaxStages * kShallowAStageBytes + kTransposedConsumers * kTransposedConsumerBytes +
         kAlignSlack;
}
static_assert(transposed_smem_bytes() <= kSmemLimit, "over the sm_90 shared-memory limit");

__device__ __forceinline__ void transposed_barrier_sync(uint32_t id) {
  asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory");
}

// Four 8 × 8 matrices of 16-bit elements from the accumulator layout into shared memory,
// transposed: lane t gives the address of row t % 8 of matrix t / 8, which receives column t % 8
// of that matrix (register i of each lane holds matrix i's row lane / 4, columns 2·(lane % 4)
// and 2·(lane % 4) + 1).
__device__ __forceinline__ void stsm_x4_trans(uint32_t address, uint32_t r0, uint32_t r1,
                                              uint32_t r2, uint32_t r3) {
  asm volatile(
      "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(address),
      "r"(r0), "r"(r1), "r"(r2), "r"(r3)
      : "memory");
}

// A's row blocks of 128 over one stage (the wide form's A), copied raw into the A region (block
// s at a_region + s · 16 KB); rows past rows_a are zero-filled.
template <bool kAKContig>
__device__ __forceinline__ void copy_a_row_blocks(const IntegerGemmArgs& p, uint32_t a_region,
                                                  int rows_a, int blocks) {
  const ConvGather& g = p.gather;
  const int16_t* const a_tile = static_cast<const int16_t*>(p.a.data);
  const int64_t a_ld = kAKContig ? p.a.row_stride : p.a.k_stride;
  TapWalk walk;
  walk.init(g, 0);
  for (int s = 0; s < blocks; ++s) {
    const int rows = rows_a - 128 * s < 128 ? rows_a - 128 * s : 128;
    copy_raw_stage<int16_t, kAKContig>(a_region + s * kShallowAStageBytes,
                                       a_tile + int64_t(128 * s) * p.a.row_stride, a_ld, rows,
                                       walk.channels(g));
  }
}

// A unit's 64 positions × 64 rows of C from row0 (its values combined: H and L in the rounding),
// rounded, through the staging box at `box` (the store that last read it has, once the
// consumer's issuer has waited for it) to a bulk tensor store by the consumer's issuer; the
// running pair extremes of the stored values kept.
template <typename Rounded>
__device__ __forceinline__ void store_transposed_box(const Rounded& rounded,
                                                     const CUtensorMap& c_map, uint32_t box,
                                                     uint32_t stsm_offset, int consumer,
                                                     bool issuer, int32_t position0, int32_t row0,
                                                     uint64_t store_policy, uint32_t& pair_max,
                                                     uint32_t& pair_min) {
  // The store that last read this box (kTransposedBoxes units ago) is done reading it.
  if (issuer) tma::store_wait_read<kTransposedBoxes - 1>();
  transposed_barrier_sync(1 + consumer);
#pragma unroll
  for (int jp = 0; jp < 4; ++jp) {
    uint32_t w[4];  // (column block 2·jp, then 2·jp + 1) × (position half 0, 1)
    pack_block_pair(rounded, 2 * jp, w, pair_max, pair_min);
    stsm_x4_trans(box + stsm_offset + 2048 * jp, w[0], w[1], w[2], w[3]);
  }
  wgmma::fence_proxy_async_shared();
  transposed_barrier_sync(1 + consumer);
  if (issuer) {
    tma::store_2d_hinted(&c_map, position0, row0, box, store_policy);
    tma::store_commit();
  }
}

// A transposed-kernel consumer (`consumer`, its four warps): its tiles, stage by stage from its
// raw ring (refilled kTransposedSlots stages ahead by its issuer through `issue`), each unit's
// epilogue through its staging boxes; then the statistics. `full`: its raw slots' barriers.
template <bool kWide, typename WorkerOf, typename StagesOf, typename Issue>
__device__ __forceinline__ void run_transposed_consumer(
    const IntegerGemmArgs& p, const CUtensorMap& c_map, uint32_t smem_address, uint32_t a_region,
    uint32_t consumer_region, uint32_t full, int stages, int rows_a, int workers, int consumer,
    const WorkerOf& worker_of, const StagesOf& stages_of, const Issue& issue) {
  constexpr int kSlots = kTransposedSlots;
  const int warp = (threadIdx.x >> 5) & 3;
  const int lane = threadIdx.x & 31;
  const bool issuer = (threadIdx.x & 127) == 0;
  const uint32_t raw_ring = consumer_region + consumer * kTransposedConsumerBytes;
  const uint32_t boxes = raw_ring + kSlots * kTransposedStageBytes;
  const int worker = worker_of(consumer);
  const int total = stages_of(consumer);
  const int my_tiles = total / stages;

  uint32_t desc_hi, desc_lo;
  wgmma::descriptor_words(smem_address, desc_hi, desc_lo);
  const uint32_t d_a = desc_lo + ((a_region - smem_address) >> 4);
  auto desc = [&](uint32_t lo) { return uint64_t(lo) | (uint64_t(desc_hi) << 32); };

  // This lane's ldmatrix.trans row in a raw stage: matrix i = lane / 8 is (ph, h) = (i / 2, i % 2),
  // row r = lane % 8 the box row r + 8·h (+ 16·kh + 32·s per load), chunk 2·warp + ph.
  const int r = lane & 7, matrix = lane >> 3;
  const uint32_t ldsm_offset = (r + 8 * (matrix & 1)) * 128 + 16 * ((2 * warp + (matrix >> 1)) ^ r);
  // This lane's stmatrix.trans row in a staging box: matrix i = lane / 8 is (column block
  // 2·jp + i / 2, position half i % 2), its row r the box row (C's row) 8·(2·jp + i / 2) + r,
  // chunk 2·warp + i % 2.
  const uint32_t stsm_offset = (8 * (matrix >> 1) + r) * 128 + 16 * ((2 * warp + (matrix & 1)) ^ r);

  const uint64_t store_policy = tma::evict_first_policy();
  const portable::ByteProductRounding rounding = lane_varying_rounding(p.epilogue.scale);
  // Values past the matrix (positions past n, rows past m) are products of zero fill, and none
  // of them is clamped.
  int32_t stat_max = 0, stat_min = 0;
  uint32_t stat_saturated = 0;

  uint32_t acc_hi[32] = {}, acc_mid[32] = {}, acc_lo[32] = {};
  auto rounded = [&](int i) {
    return portable::gemm_round_combined_byte_products({acc_mid[i], acc_lo[i]}, rounding);
  };

  // A stage's raw words (two k32 steps × two k-halves × the four matrices of a load) and its
  // fragments (per k32 step, four registers of high bytes and four of low bytes).
  uint32_t raw[2][2][4];
  uint32_t frag_hi[2][4] = {}, frag_lo[2][4] = {};
  auto load = [&](int q) {
    const uint32_t from = raw_ring + (q % kSlots) * kTransposedStageBytes + ldsm_offset;
#pragma unroll
    for (int s = 0; s < 2; ++s) {
#pragma unroll
      for (int kh = 0; kh < 2; ++kh) ldsm_x4_trans(from + 4096 * s + 2048 * kh, raw[s][kh]);
    }
  };
  // Keeps step s's fragments from being reused before the wait of the wgmmas that read them
  // (ptxas does not track the RS form's reads).
  auto hold = [&](int s) {
#pragma unroll
    for (int i = 0; i < 4; ++i) asm volatile("" ::"r"(frag_hi[s][i]), "r"(frag_lo[s][i]));
  };
  // Step s's register ph + 2·kh (position half ph, k-half kh) from the load's words 2·ph
  // (channels 4t, 4t + 1) and 2·ph + 1 (4t + 2, 4t + 3).
  auto split = [&](int s) {
#pragma unroll
    for (int kh = 0; kh < 2; ++kh) {
#pragma unroll
      for (int ph = 0; ph < 2; ++ph) {
        const uint32_t w01 = raw[s][kh][2 * ph], w23 = raw[s][kh][2 * ph + 1];
        frag_hi[s][ph + 2 * kh] = __byte_perm(w01, w23, 0x7531);
        frag_lo[s][ph + 2 * kh] = __byte_perm(w01, w23, 0x6420);
      }
    }
    // Computed before wgmma.fence, so that the permutes are not sunk past it.
#pragma unroll
    for (int i = 0; i < 4; ++i)
      asm volatile("" : "+r"(frag_hi[s][i]), "+r"(frag_lo[s][i])::"memory");
  };
  // Step s's wgmmas against A's rows from byte offset `rows` (the tile's first: `fresh`).
  auto k_step = [&](int s, uint32_t rows, bool fresh) {
    const uint32_t b_step = (rows + 32 * s) >> 4;
    const uint64_t b_hi = desc(d_a + b_step), b_lo = desc(d_a + b_step + (kPlaneBytes >> 4));
    if (fresh) {
      wgmma::byte_products_rs<true>(acc_hi, acc_mid, acc_lo, frag_hi[s], frag_lo[s], b_hi, b_lo);
    } else {
      wgmma::byte_products_rs<false>(acc_hi, acc_mid, acc_lo, frag_hi[s], frag_lo[s], b_hi, b_lo);
    }
  };
  // Stage q of the consumer (stage si of its tile): its raw words, the slot's refill, then per
  // k32 step its fragments and wgmmas, each step a commit group of its own. Step s's fragments
  // are rewritten once the previous stage's step s is done, which is once at most one group is
  // pending: the tensor cores have a step of this consumer's queued while it splits the next.
  // The tile's first step writes the accumulators (`fresh`).
  auto run_stage = [&](auto fresh, int q, int si) {
    tma::wait(full + 8 * (q % kSlots), static_cast<uint32_t>(q / kSlots) & 1u);
    load(q);
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      wgmma::wait_group<1>();
      hold(s);
      split(s);
      if (s == 0) {
        // All four warps have read the slot: its next stage can be loaded.
        transposed_barrier_sync(1 + consumer);
        if (issuer && q + kSlots < total) issue(consumer, q + kSlots);
      }
      wgmma::fence();
      k_step(s, si * kShallowAStageBytes, decltype(fresh)::value && s == 0);
      wgmma::commit_group();
    }
  };

  // A unit's epilogue, once its wgmmas are issued: its 64 positions (the consumer's tile `tile`)
  // × 64 rows of C from row0, rounded, through the consumer's next staging box to a bulk tensor
  // store.
  int box_turn = 0;
  auto finish_unit = [&](int tile, int32_t row0) {
    wgmma::wait_group<0>();
    hold(0);
    hold(1);
    wgmma::pin_registers(acc_hi);
    wgmma::pin_registers(acc_mid);
    wgmma::pin_registers(acc_lo);
    combine_byte_products_in_place(acc_hi, acc_mid, acc_lo, rounding);
    uint32_t pair_max = 0x80008000u, pair_min = 0x7fff7fffu;
    store_transposed_box(
        rounded, c_map, boxes + box_turn * kTransposedBoxBytes, stsm_offset, consumer, issuer,
        static_cast<int32_t>((int64_t(worker) + int64_t(tile) * workers) * kTransposedTileN), row0,
        store_policy, pair_max, pair_min);
    box_turn = box_turn + 1 == kTransposedBoxes ? 0 : box_turn + 1;
    const int32_t unit_max = pair_max_value(pair_max);
    const int32_t unit_min = pair_min_value(pair_min);
    if (unit_max == portable::kFlex16MaxM || unit_min == portable::kFlex16MinM)
      count_clamped<32>(stat_saturated, rounded, lane, 64, true, true);
    stat_max = max(stat_max, unit_max);
    stat_min = min(stat_min, unit_min);
  };
  if constexpr (kWide) {
    // One stage a tile: its fragments (both k32 steps) serve every quarter. The previous tile's
    // last epilogue waited for all wgmmas, so no wgmma still reads the fragments being rewritten.
    const int quarters = (rows_a + 63) / 64;
#pragma unroll 1
    for (int tile = 0; tile < my_tiles; ++tile) {
      tma::wait(full + 8 * (tile % kSlots), static_cast<uint32_t>(tile / kSlots) & 1u);
      load(tile);
      split(0);
      split(1);
      // All four warps have read the slot: its next stage can be loaded.
      transposed_barrier_sync(1 + consumer);
      if (issuer && tile + kSlots < total) issue(consumer, tile + kSlots);
#pragma unroll 1
      for (int quarter = 0; quarter < quarters; ++quarter) {
        // Rows 64·quarter on: row block quarter / 2, its half quarter % 2.
        const uint32_t rows =
            (quarter >> 1) * kShallowAStageBytes + (quarter & 1) * 64 * wgmma::kRowBytes;
        wgmma::fence();
#pragma unroll
        for (int s = 0; s < 2; ++s) k_step(s, rows, s == 0);
        wgmma::commit_group();
        finish_unit(tile, 64 * quarter);
      }
    }
  } else {
#pragma unroll 1
    for (int tile = 0; tile < my_tiles; ++tile) {
      const int q0 = tile * stages;
      run_stage(std::true_type{}, q0, 0);
#pragma unroll 1
      for (int si = 1; si < stages; ++si) run_stage(std::false_type{}, q0 + si, si);
      finish_unit(tile, 0);
    }
  }

  // The statistics need not wait for the last stores (where this kernel publishes the record, its
  // last arrival is then earlier); those must have read their boxes before the CTA's shared
  // memory goes.
  // Only max |m| and the clamped count change (flex16 out, no measuring: the host's condition).
  commit_block_store_stats(static_cast<uint32_t>(stored_stats(stat_max, stat_min, 0).max_abs_m),
                           stat_saturated, p.stats, p.stats_host, p.stats_arrivals);
  if (issuer) tma::store_wait<0>();
}

// `b_map`: B (k-rows of n positions, channel_stride apart) as a 5-D map of channel
// k = b + 4·a + 2·h + 16·j at (position, b, a, h, j), boxes of 64 positions × 2 × 4 × 2 × 4:
// box row R = b + 2·a + 8·h + 16·j. A warp's ldmatrix.trans matrix (k32 step s, k-half kh,
// position half ph, h) takes as its row r the channel 32·s + 16·kh + 4·(r / 2) + r % 2 + 2·h,
// box row r + 8·h + 16·kh + 32·s: R % 8 = r, so the eight rows of a matrix, at 16-byte chunk
// c ^ (R % 8) under the swizzle, fall in eight different banks. Lane 4·g + t then holds, for
// position g (+ 8·ph), channels 4·t + 2·h and the next: two such words are the four int16 of an
// A-fragment register, split into high and low bytes by two byte permutes.
// `c_map`: C as a 2-D map, boxes of 64 positions × 64 rows, 128-byte swizzle.
//
// kWide: up to 256 output rows over one stage (k ≤ 64: C64 K256 fprop, C256 K64 bprop, where the
// output is four times the input). A's 16 KB blocks are then its row blocks of 128, and a tile's
// unit is a 64-row quarter of it: the stage is read and split into fragments once, and each
// quarter takes the same fragments against its own rows of A, then its own epilogue and store.
template <bool kAKContig, bool kWide>
__global__ void __launch_bounds__(kTransposedThreads, 1)
    gemm_shallow_transposed_kernel(const __grid_constant__ IntegerGemmArgs p,
                                   const __grid_constant__ CUtensorMap b_map,
                                   const __grid_constant__ CUtensorMap c_map) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kSlots = kTransposedSlots;

  extern __shared__ unsigned char smem_raw[];
  __shared__ uint64_t full_barriers[kTransposedConsumers * kSlots];
  const uint32_t smem_address = aligned_shared_address(smem_raw);
  const uint32_t a_region = smem_address;  // stage s at + s · 16 KB: high plane, then low
  const uint32_t consumer_region = a_region + kShallowMaxStages * kShallowAStageBytes;
  const int stages = static_cast<int>((p.k + kWgmmaStageK - 1) / kWgmmaStageK);
  const int rows_a = static_cast<int>(p.m);  // ≤ 64, or ≤ 256 where kWide (the host's condition)
  // A's 16 KB blocks: its k stages, or (kWide: one stage) its row blocks of 128.
  const int a_blocks = kWide ? (rows_a + 127) / 128 : stages;

  // Tiles of consumer c: worker c + kConsumers·blockIdx.x, then every workers-th one (neighbouring
  // workers on neighbouring tiles at any one time). Its stage q (tile q / stages, stage q %
  // stages) goes to its raw slot q % kSlots.
  const int64_t tiles = (p.n + kTransposedTileN - 1) / kTransposedTileN;
  const int workers = static_cast<int>(gridDim.x) * kTransposedConsumers;
  auto worker_of = [&](int c) { return static_cast<int>(blockIdx.x) * kTransposedConsumers + c; };
  auto stages_of = [&](int c) {
    const int w = worker_of(c);
    return (tiles > w ? static_cast<int>((tiles - w + workers - 1) / workers) : 0) * stages;
  };
  const uint64_t read_policy = tma::evict_first_policy();
  auto issue = [&](int c, int q) {
    const int slot = q % kSlots;
    const int32_t position0 = static_cast<int32_t>(
        (int64_t(worker_of(c)) + int64_t(q / stages) * workers) * kTransposedTileN);
    const uint32_t barrier = tma::shared_address(&full_barriers[c * kSlots + slot]);
    tma::arrive_expect_bytes(barrier, kTransposedStageBytes);
    tma::load_5d_hinted(
        consumer_region + c * kTransposedConsumerBytes + slot * kTransposedStageBytes, &b_map,
        position0, 0, 0, 0, 4 * (q % stages), barrier, read_policy);
  };

  if (threadIdx.x == 0) {
    for (int s = 0; s < kTransposedConsumers * kSlots; ++s)
      tma::barrier_init(tma::shared_address(&full_barriers[s]), 1);
    tma::barrier_init_fence();
    tma::prefetch_map(&b_map);
    tma::prefetch_map(&c_map);
  }
  // Launched as a programmatic dependent (dependent_launch.cuh): nothing above touched global
  // memory, everything below may read what the grid before wrote, or write what it reads.
  wait_for_prerequisite_grid();
  // A: every stage, copied raw and split in place by the first 256 threads (the shallow kernels'
  // mappings). Rows past m and channels past k are zeros, so the products there are 0.
  if (threadIdx.x < kWgmmaThreads) {
    if constexpr (kWide) {
      copy_a_row_blocks<kAKContig>(p, a_region, rows_a, a_blocks);
    } else {
      copy_a_stages<kAKContig>(p, a_region, 0, rows_a, a_blocks);
    }
    cp_async_commit();
  }
  // Every consumer's first stages, issued by the thread that set up their barriers once all of
  // A's copies are on their way (ahead of them), the consumers' first stages first: B's first
  // bytes arrive while A is split.
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int q = 0; q < kSlots; ++q) {
      for (int c = 0; c < kTransposedConsumers; ++c)
        if (q < stages_of(c)) issue(c, q);
    }
  }
  if (threadIdx.x < kWgmmaThreads) cp_async_wait<0>();
  __syncthreads();
  split_a_blocks_in_place<kAKContig>(a_region, a_blocks);

  // Broadcast from lane 0: the compiler then knows it is the same in the whole warp.
  const int consumer = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x >> 7), 0);
  run_transposed_consumer<kWide>(p, c_map, smem_address, a_region, consumer_region,
                                 tma::shared_address(&full_barriers[consumer * kSlots]), stages,
                                 rows_a, workers, consumer, worker_of, stages_of, issue);
#elif defined(__CUDA_ARCH__)
  __trap();  // the PTX fallback: never launched (prepare_shallow_transposed reports false)
#endif
}

}  // namespace wgmma_detail
}  // namespace flexkit::backend::cuda::gemm_kernels
