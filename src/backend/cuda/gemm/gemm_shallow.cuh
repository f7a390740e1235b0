// The shallow exact GEMM kernel (sm_90a): implicit-GEMM convolutions whose whole K is one to
// four 64-deep stages, i.e. 1×1 layers with at most 256 input channels (fprop) or output
// channels (bprop). Flex16 activations take its warp-specialised form
// (gemm_shallow_specialized.cuh), which reuses the pieces below; this one-role ("lockstep")
// kernel runs u8 spikes, and flex16 under FLEXKIT_CONV_KERNEL=lockstep. Such a layer is a
// stream of output tiles with almost no arithmetic each: bound by memory traffic, and by the
// epilogue's instructions once the traffic is overlapped.
//
// The lean kernel (gemm_wgmma.cuh) runs one tile per CTA and, with 255 registers per thread, one
// CTA per multiprocessor: every tile pays the load latency, its split and its epilogue one after
// the other (measured: 0.1 of the copy rate on 1×1 C64 K256 56×56). This kernel is persistent:
// - each CTA owns one row of tiles (tile_m fixed) and walks its columns; A's stages are loaded
//   and split into byte planes once, in place, and stay resident;
// - the stages of B (gathered activations) stream through one raw cp.async ring across tile
//   boundaries, so the loads of the next tiles are in flight while a tile's epilogue runs;
// - a tile's first wgmma overwrites the accumulators (no zeroing pass);
// - the epilogue works in 32-bit arithmetic (gemm_round_byte_products / gemm_round_int32: at
//   most 256 products), mostly in multiply-adds on the FMA pipe beside the ALU pipe; it packs
//   pairs of rounded values saturated to int16 (cvt.pack.sat) and keeps the packed pairs'
//   maximum and minimum (one three-way max and min per four values). Only a thread whose
//   extremes reach a bound of the int16 range recounts its values for saturation. Statistics
//   are committed once per CTA;
// - state that no epilogue reads (the column cursor, the gather of a tile's later stages, the
//   split's offsets, the statistics so far) waits in shared memory between its uses, which
//   leaves the rounding more registers for elements in flight (see ThreadStash).
// The loop per B stage g (stage si of its tile): wgmmas of stage g (plane slot g % 3) with A's
// resident stage si; copies of stage g + R into raw slot g % R; split of stage g + 1 into plane
// slot (g + 1) % 3; at the tile's last stage, wait for the wgmmas and run the epilogue; wait until
// stage g + 2 has landed; barrier — the lean kernel's ring, without A.
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backend/cuda/gemm/gemm_wgmma.cuh"

namespace flexkit::backend::cuda::gemm_kernels {
namespace wgmma_detail {

inline constexpr int kShallowMaxStages = 4;
inline constexpr int kShallowAStageBytes = 2 * kPlaneBytes;  // raw int16 stage = its two planes
static_assert(kShallowAStageBytes == kRawS16Bytes, "A's stages are split in place");

// The raw ring's depth: whatever shared memory the resident A stages leave (a one-stage K keeps
// 16 KB of A, so its ring holds seven stages of int16 B in flight, four-stage ones four).
__host__ __device__ constexpr int shallow_raw_slots(bool b_is_u8, int a_stages) {
  return b_is_u8 ? 8 : a_stages == 1 ? 7 : 4;
}
// The store staging: each warp's 16 rows × 64 columns (half the tile's width) of int16 at a
// pitch of 144 bytes, so that the accumulator layout's word writes (8 rows × 4 lanes) hit 32
// different banks; read back 16 bytes per lane and stored 4 rows × 128 bytes per warp
// instruction (whole 32-byte sectors instead of halves of them).
inline constexpr int kShallowStagePitch = 144;
inline constexpr int kShallowStageBytes = (kWgmmaThreads / 32) * 16 * kShallowStagePitch;
__host__ __device__ constexpr int shallow_b_raw_bytes(bool b_is_u8) {
  return (b_is_u8 ? 1 : 2) * kWgmmaTileN * kWgmmaStageK;
}
__host__ __device__ constexpr int shallow_b_plane_bytes(bool b_is_u8) {
  return (b_is_u8 ? 1 : 2) * kPlaneBytes;
}
// Per-thread state that every tile needs once but that no epilogue reads — the column cursor's
// position, the B split's offsets and selectors, the CTA's statistics — is kept in shared memory
// between its uses (word w of thread t at 4·(w·256 + t): conflict-free). In registers it was
// live across the epilogue beside the 192 accumulators, which left the rounding about eight
// registers for its temporaries and so only two elements in flight per warp.
inline constexpr int kShallowStashWords = 23;
inline constexpr int kStashCursor = 0, kStashSplit = 6, kStashStats = 10, kStashGather = 13;
inline constexpr int kShallowStashBytes = kShallowStashWords * kWgmmaThreads * 4;
__host__ __device__ constexpr int shallow_smem_bytes(bool b_is_u8, int a_stages) {
  return a_stages * kShallowAStageBytes +
         shallow_raw_slots(b_is_u8, a_stages) * shallow_b_raw_bytes(b_is_u8) +
         kDeepPlaneSlots * shallow_b_plane_bytes(b_is_u8) + kShallowStageBytes +
         kShallowStashBytes + kAlignSlack;
}
static_assert(shallow_smem_bytes(false, 1) <= kSmemLimit &&
                  shallow_smem_bytes(false, kShallowMaxStages) <= kSmemLimit &&
                  shallow_smem_bytes(true, kShallowMaxStages) <= kSmemLimit,
              "over the sm_90 shared-memory limit per block");

// The epilogue pieces both shallow kernels share (this one and gemm_shallow_specialized.cuh).
// Two rounded values saturated to int16 and packed (q0 in the low half), in one instruction.
__device__ __forceinline__ uint32_t pack_saturated(int32_t q0, int32_t q1) {
  uint32_t packed;
  asm("cvt.pack.sat.s16.s32 %0, %1, %2;" : "=r"(packed) : "r"(q1), "r"(q0));
  return packed;
}
// The larger and the smaller of the two int16 halves of running pair extremes (__vimax3_s16x2,
// __vimin3_s16x2 over the packed words stored).
__device__ __forceinline__ int32_t pair_max_value(uint32_t pair_max) {
  return max(static_cast<int32_t>(pair_max) >> 16,
             static_cast<int32_t>(static_cast<int16_t>(pair_max)));
}
__device__ __forceinline__ int32_t pair_min_value(uint32_t pair_min) {
  return min(static_cast<int32_t>(pair_min) >> 16,
             static_cast<int32_t>(static_cast<int16_t>(pair_min)));
}
// Adds to `clamped` how many of a thread's first kCount accumulator values were clamped on
// store, from their unclamped roundings: only called where a stored extreme sits on a bound
// (rare). Accumulator i is column 8·(i/4) + 2·(lane%4) + i%2 of the unit (stored where < cols)
// and row 8·((i/2)%2) of the thread's pair (stored where row_ok0 / row_ok1). Unrolled: an indexed
// accumulator would move the arrays into local memory.
template <int kCount, typename Rounded>
__device__ __forceinline__ void count_clamped(uint32_t& clamped, const Rounded& rounded, int lane,
                                              int cols, bool row_ok0, bool row_ok1) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) {
    const int j = i >> 2, r = (i >> 1) & 1;
    const int32_t q = rounded(i);
    if (8 * j + 2 * (lane & 3) + (i & 1) < cols && (r ? row_ok1 : row_ok0))
      clamped += q > portable::kFlex16MaxM || q < portable::kFlex16MinM ? 1 : 0;
  }
}
// H and L of every one of a thread's accumulator values, in place (mid ← H, ll ← L): the
// rounding's first step taken over all values before any is rounded, after which hh's registers
// are free for the values in flight.
template <int kCount>
__device__ __forceinline__ void combine_byte_products_in_place(
    const uint32_t (&hh)[kCount], uint32_t (&mid)[kCount], uint32_t (&ll)[kCount],
    const portable::ByteProductRounding& rounding) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) {
    const portable::CombinedByteProducts c = portable::gemm_combine_byte_products(
        static_cast<int32_t>(hh[i]), static_cast<int32_t>(mid[i]), static_cast<int32_t>(ll[i]),
        rounding);
    mid[i] = c.h;
    ll[i] = c.l;
  }
  wgmma::pin_registers(mid);
  wgmma::pin_registers(ll);
}
// Column blocks j0 and j0 + 1 of a thread's accumulators (accumulator 4·j + 2·r + c: block j, row
// r of the thread's pair, column c), rounded by `rounded` and packed into w in stmatrix order
// (block j0 rows 0 and 1, then block j0 + 1), their extremes kept in the running pair extremes.
template <typename Rounded>
__device__ __forceinline__ void pack_block_pair(const Rounded& rounded, int j0, uint32_t (&w)[4],
                                                uint32_t& pair_max, uint32_t& pair_min) {
#pragma unroll
  for (int b = 0; b < 2; ++b) {
    const int i = 4 * (j0 + b);
    w[2 * b] = pack_saturated(rounded(i), rounded(i + 1));
    w[2 * b + 1] = pack_saturated(rounded(i + 2), rounded(i + 3));
  }
  pair_max = __vimax3_s16x2(pair_max, w[0], w[1]);
  pair_min = __vimin3_s16x2(pair_min, w[0], w[1]);
  pair_max = __vimax3_s16x2(pair_max, w[2], w[3]);
  pair_min = __vimin3_s16x2(pair_min, w[2], w[3]);
}
// A CTA's statistics record from the extremes of the values it stored and its clamped count.
__device__ __forceinline__ portable::GemmStats stored_stats(int32_t stored_max, int32_t stored_min,
                                                            uint32_t saturated) {
  portable::GemmStats stats = portable::gemm_stats_identity();
  const int32_t top = stored_max < portable::kFlex16MaxM ? stored_max : portable::kFlex16MaxM;
  const int32_t bottom =
      -stored_min < -portable::kFlex16MinM ? -stored_min : -portable::kFlex16MinM;
  stats.max_abs_m = top > bottom ? top : bottom;
  stats.saturated = saturated;
  return stats;
}

// The int16 rounding's multipliers from a 1 in a register the compiler cannot prove uniform (the
// bit count of the lane's own mask bit): with `one` and 2^(s−1) both in uniform registers, ptxas
// copied `one` into a vector register before each value's multiply-add L = ll·1 + 2^(s−1), an
// instruction more per value.
__device__ __forceinline__ portable::ByteProductRounding lane_varying_rounding(int32_t scale) {
  uint32_t lane_bit;
  asm("mov.u32 %0, %%lanemask_eq;" : "=r"(lane_bit));
  const uint32_t one = __popc(lane_bit) + (static_cast<uint32_t>(scale) >> 31);
  return portable::gemm_byte_product_rounding(scale, one);
}

// A warp's 16 staging rows of 64 int16 (kShallowStagePitch apart, written by all its lanes) read
// back 16 bytes a lane and stored as whole 128-byte row segments: the warp's rows from warp_out,
// rs apart, columns 64 · half on.
__device__ __forceinline__ void store_staged_rows(uint32_t staging, int16_t* warp_out, int64_t rs,
                                                  int half, int lane) {
  __syncwarp();
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int staged_row = 4 * k + (lane >> 3);
    const uint4 v = lds128(staging + staged_row * kShallowStagePitch + 16 * (lane & 7));
    *reinterpret_cast<uint4*>(warp_out + staged_row * rs + 64 * half + 8 * (lane & 7)) = v;
  }
  __syncwarp();
}

// A column (position o over `out`, batch entry n) moved by a fixed step of columns with carries
// instead of divisions: the step is decoded once (dn < batch, d2 < out[2], d1 < out[1], d0).
struct ColumnCursor {
  int64_t col;
  int32_t o[3], n;
  int32_t dn, d[3];  // the step, decoded (the same in every thread)
  int64_t step;

  __device__ __forceinline__ void init(const ConvGather& g, int64_t first, int64_t step_) {
    col = first;
    step = step_;
    int64_t o64[3], n64;
    split_column(g, first, o64, n64);
    n = static_cast<int32_t>(n64);
    for (int k = 0; k < 3; ++k) o[k] = static_cast<int32_t>(o64[k]);
    split_column(g, step, o64, n64);
    dn = static_cast<int32_t>(n64);
    for (int k = 0; k < 3; ++k) d[k] = static_cast<int32_t>(o64[k]);
  }
  __device__ __forceinline__ void advance(const ConvGather& g) {
    col += step;
    n += dn;
    int carry = n >= g.batch;
    n -= carry ? g.batch : 0;
    o[2] += d[2] + carry;
    carry = o[2] >= g.out[2];
    o[2] -= carry ? g.out[2] : 0;
    o[1] += d[1] + carry;
    carry = o[1] >= g.out[1];
    o[1] -= carry ? g.out[1] : 0;
    o[0] += d[0] + carry;  // past the last position only where col ≥ columns (never read)
  }
  // The part that differs between threads (the step is the same in all of them).
  static constexpr int kPositionWords = 6;
  __device__ __forceinline__ void save_position(uint32_t (&w)[kPositionWords]) const {
    w[0] = static_cast<uint32_t>(col);
    w[1] = static_cast<uint32_t>(static_cast<uint64_t>(col) >> 32);
    for (int k = 0; k < 3; ++k) w[2 + k] = static_cast<uint32_t>(o[k]);
    w[5] = static_cast<uint32_t>(n);
  }
  __device__ __forceinline__ void load_position(const uint32_t (&w)[kPositionWords]) {
    col = static_cast<int64_t>((uint64_t(w[1]) << 32) | w[0]);
    for (int k = 0; k < 3; ++k) o[k] = static_cast<int32_t>(w[2 + k]);
    n = static_cast<int32_t>(w[5]);
  }
  __device__ __forceinline__ void position(int64_t (&o64)[3], int64_t& n64) const {
    for (int k = 0; k < 3; ++k) o64[k] = o[k];
    n64 = n;
  }
};

// This thread's words of the stash: loads and stores are volatile shared accesses, so the
// compiler cannot keep a stashed value in a register across the code between them.
struct ThreadStash {
  uint32_t at;  // the thread's word 0
  __device__ __forceinline__ void init(uint32_t region) { at = region + 4u * threadIdx.x; }
  template <int kWords>
  __device__ __forceinline__ void save(int first, const uint32_t (&w)[kWords]) const {
#pragma unroll
    for (int i = 0; i < kWords; ++i) sts32(at + 4u * kWgmmaThreads * (first + i), w[i]);
  }
  template <int kWords>
  __device__ __forceinline__ void load(int first, uint32_t (&w)[kWords]) const {
#pragma unroll
    for (int i = 0; i < kWords; ++i) w[i] = lds32(at + 4u * kWgmmaThreads * (first + i));
  }
  template <int kWords>
  __device__ __forceinline__ void save_zeros(int first) const {
    const uint32_t zero[kWords] = {};
    save(first, zero);
  }
  // A trivially copyable object as words.
  template <typename T>
  __device__ __forceinline__ void save_object(int first, const T& v) const {
    static_assert(sizeof(T) % 4 == 0 && std::is_trivially_copyable_v<T>);
    uint32_t w[sizeof(T) / 4];
    memcpy(w, &v, sizeof(T));
    save(first, w);
  }
  template <typename T>
  __device__ __forceinline__ T load_object(int first) const {
    uint32_t w[sizeof(T) / 4];
    load(first, w);
    T v;
    memcpy(&v, w, sizeof(T));
    return v;
  }
};

// A's raw int16 blocks (`blocks` of kShallowAStageBytes from a_region, copied and landed) split in
// place into their high and low byte planes by the block's first 256 threads, then made visible
// to the wgmmas (the async proxy). Every thread of the block calls it: it holds barriers.
template <bool kAKContig>
__device__ __forceinline__ void split_a_blocks_in_place(uint32_t a_region, int blocks) {
  using Splitter = LeanSplitter<false, kAKContig, false, kWgmmaTileN>;
  Splitter splitter;
  splitter.init();
  for (int s = 0; s < blocks; ++s) {
    typename Splitter::Regs r;
    const uint32_t block_address = a_region + s * kShallowAStageBytes;
    if (threadIdx.x < kWgmmaThreads) splitter.load_a(block_address, r);
    __syncthreads();
    if (threadIdx.x < kWgmmaThreads) splitter.a.store(r.a, block_address);
  }
  wgmma::fence_proxy_async_shared();
  __syncthreads();
}

// A's stages of the tile row from row0 (rows_a of them inside), copied raw into the A region
// (stage s at a_region + s · 16 KB), one tap-major stage after the other.
template <bool kAKContig>
__device__ __forceinline__ void copy_a_stages(const IntegerGemmArgs& p, uint32_t a_region,
                                              int64_t row0, int rows_a, int stages) {
  const ConvGather& g = p.gather;
  const int16_t* const a_tile = static_cast<const int16_t*>(p.a.data) + row0 * p.a.row_stride;
  const int64_t a_ld = kAKContig ? p.a.row_stride : p.a.k_stride;
  TapWalk walk;
  walk.init(g, 0);
  for (int s = 0; s < stages; ++s) {
    copy_raw_stage<int16_t, kAKContig>(a_region + s * kShallowAStageBytes, a_tile + walk.a_offset,
                                       a_ld, rows_a, walk.channels(g));
    walk.advance(g);
  }
}

// A's raw int16 stages (landed) split in place into their byte planes by all the block's threads:
// every thread's raw reads of a stage before anyone's plane writes.
template <typename Splitter>
__device__ __forceinline__ void split_a_stages_in_place(const Splitter& splitter, uint32_t a_region,
                                                        int stages) {
  for (int s = 0; s < stages; ++s) {
    typename Splitter::Regs r;
    const uint32_t stage_address = a_region + s * kShallowAStageBytes;
    splitter.load_a(stage_address, r);
    __syncthreads();
    splitter.a.store(r.a, stage_address);
  }
}

// The CTA's statistics from the extremes and clamped count stashed over its tiles.
__device__ __forceinline__ void commit_stashed_stats(const ThreadStash& stash,
                                                     portable::GemmStats* stats) {
  uint32_t words[3];
  stash.load(kStashStats, words);
  const int32_t cta_max = static_cast<int32_t>(words[0]), cta_min = static_cast<int32_t>(words[1]);
  commit_block_stats(stored_stats(cta_max, cta_min, words[2]), stats);
}

// A tile's extremes (from the running pair extremes of its stored values) and clamped count
// added to those stashed over the CTA's tiles.
template <typename Rounded>
__device__ __forceinline__ void add_stashed_tile_stats(const ThreadStash& stash, uint32_t pair_max,
                                                       uint32_t pair_min, const Rounded& rounded,
                                                       int lane, int cols, bool row_ok0,
                                                       bool row_ok1) {
  const int32_t tile_max = pair_max_value(pair_max);
  const int32_t tile_min = pair_min_value(pair_min);
  uint32_t saturated = 0;
  if (tile_max == portable::kFlex16MaxM || tile_min == portable::kFlex16MinM)
    count_clamped<64>(saturated, rounded, lane, cols, row_ok0, row_ok1);
  uint32_t stats[3];
  stash.load(kStashStats, stats);
  stats[0] = static_cast<uint32_t>(max(static_cast<int32_t>(stats[0]), tile_max));
  stats[1] = static_cast<uint32_t>(min(static_cast<int32_t>(stats[1]), tile_min));
  stats[2] += saturated;
  stash.save(kStashStats, stats);
}

// The cursor's position into the stash, and back.
__device__ __forceinline__ void stash_cursor(const ThreadStash& stash, const ColumnCursor& cursor) {
  uint32_t w[ColumnCursor::kPositionWords];
  cursor.save_position(w);
  stash.save(kStashCursor, w);
}

// B's split of the raw slot at `raw` into the plane slot at `planes`, the split's offsets and
// selectors from the stash.
template <bool kBIsU8, typename BSplit, typename SplitRegs>
__device__ __forceinline__ void split_stashed_b(const ThreadStash& stash, uint32_t raw,
                                                uint32_t planes) {
  const BSplit b = stash.load_object<BSplit>(kStashSplit);
  SplitRegs r;
  if constexpr (kBIsU8) {
    b.template load<kWgmmaTileN>(raw, r.b);
  } else {
    b.load(raw, r.b);
  }
  b.store(r.b, planes);
}

// The lockstep kernel's tiles, A resident and B's first stages in flight (see the kernel):
// per tile its stages (run_stage: the wgmmas, the copies `issue_next` issues R stages ahead, the
// split `split_b` makes of the next stage) and its epilogue; then the CTA's statistics.
template <bool kBIsU8, int kAStages, typename IssueNext, typename SplitB>
__device__ __forceinline__ void run_lockstep_tiles(
    const IntegerGemmArgs& p, const ThreadStash& stash, const uint32_t smem_address,
    const uint32_t a_region, const uint32_t b_raw, const uint32_t b_planes, const uint32_t staging,
    const int stages, const int first_n, const int ctas_per_row, const int tile_count,
    const int64_t row0, const int rows_a, IssueNext& issue_next, SplitB& split_b) {
  constexpr int kSlots = shallow_raw_slots(kBIsU8, kAStages);
  constexpr uint32_t kBRawBytes = shallow_b_raw_bytes(kBIsU8);
  constexpr uint32_t kBPlaneBytes = shallow_b_plane_bytes(kBIsU8);
  // Descriptors (low words; the high word is the same for all), advanced by byte offset >> 4.
  const int warpgroup = threadIdx.x >> 7;
  uint32_t desc_hi, desc_lo;
  wgmma::descriptor_words(smem_address, desc_hi, desc_lo);
  const uint32_t d_a =
      desc_lo + ((a_region - smem_address + warpgroup * 64 * wgmma::kRowBytes) >> 4);
  const uint32_t d_b = desc_lo + ((b_planes - smem_address) >> 4);
  auto desc = [&](uint32_t lo) { return uint64_t(lo) | (uint64_t(desc_hi) << 32); };
  // A warpgroup whose 64 rows all lie past the matrix (m ≤ 64) skips the epilogue (it still
  // issues its wgmmas, on zero-filled rows: see run_stage).
  const bool active = warpgroup == 0 || rows_a > 64;

  const int warp_in_group = (threadIdx.x >> 5) & 3;
  const int lane = threadIdx.x & 31;
  const int row = 64 * warpgroup + 16 * warp_in_group + (lane >> 2);
  const bool row_ok0 = row < rows_a, row_ok1 = row + 8 < rows_a;
  // The staged stores exchange values between the warp's lanes: they need all 16 of the warp's
  // rows inside, a condition that does not depend on the lane.
  const bool warp_rows_ok = row - (lane >> 2) + 16 <= rows_a;
  const int64_t rs = p.c.row_stride;
  int16_t* const out_warp = static_cast<int16_t*>(p.c.data) + (row0 + row - (lane >> 2)) * rs;
  // 16-byte stores need 16-byte aligned rows.
  const bool staged = rs % 8 == 0 && reinterpret_cast<uintptr_t>(p.c.data) % 16 == 0;
  const int32_t scale = p.epilogue.scale;
  // The unclamped extremes of the rounded values of every tile so far and the count of saturated
  // elements (< 64 per thread and tile), stashed between tiles.
  stash.save_zeros<3>(kStashStats);

  // Written by every tile's first wgmmas (the `fresh` forms), read by its epilogue.
  // (Value-initialised only to quiet the front end: the first writes make the zeros dead.)
  uint32_t acc_hi[64] = {}, acc_mid[kBIsU8 ? 1 : 64] = {}, acc_lo[64] = {};
  // The multipliers of the int16 rounding, built from a 1 the compiler cannot fold (scale is
  // never negative here), so that they stay multiplies on the FMA pipe.
  const uint32_t one = 1u + (static_cast<uint32_t>(scale) >> 31);
  const portable::ByteProductRounding rounding = portable::gemm_byte_product_rounding(scale, one);
  // Where the resident A stages leave the fewest registers (four stages), H and L of every value
  // are formed before any is rounded: measured on the H200, 1x1 C256 K64 fprop and C64 K256
  // bprop (m 64, k 256) went from 0.068 to 0.062 ms, and their 20 bytes of spills went. The
  // one-stage kernels measured the same or slower that way (C256 K64 bprop 0.065 → 0.069 ms).
  constexpr bool kCombineFirst = !kBIsU8 && kAStages > 1;
  auto rounded = [&](int i) {
    if constexpr (kBIsU8) {
      return portable::gemm_round_int32(static_cast<int32_t>(acc_hi[i] * 256u + acc_lo[i]), scale);
    } else {
      if constexpr (kCombineFirst) {
        // acc_mid and acc_lo hold H and L here (see the epilogue).
        return portable::gemm_round_combined_byte_products({acc_mid[i], acc_lo[i]}, rounding);
      } else {
        return portable::gemm_round_byte_products(static_cast<int32_t>(acc_hi[i]),
                                                  static_cast<int32_t>(acc_mid[i]),
                                                  static_cast<int32_t>(acc_lo[i]), rounding);
      }
    }
  };

  // Ring positions as byte offsets: raw_issue holds stage + R (= stage % R), the raw slot after
  // it stage + 1; plane_mma holds stage (stage % 3), the plane slot after it stage + 1.
  uint32_t raw_issue = 0, plane_mma = 0;
  int stage = 0;  // the CTA's B stage the wgmmas consume next
  // One stage: the wgmmas of B stage `stage` with A's resident stage si (a tile's first product
  // written, not accumulated: `fresh`), the copies of stage + R, the split of stage + 1. Every
  // warpgroup issues the wgmmas (a branch around them makes ptxas serialise them); one whose
  // rows all lie past the matrix only skips the epilogue.
  auto run_stage = [&](auto fresh, int si) {
    wgmma::fence();
    // One 32-deep k step; `first`: write the accumulators instead of adding to them.
    auto k_step = [&](int ks, auto first) {
      const uint32_t a_step = (si * kShallowAStageBytes + 32 * ks) >> 4;
      const uint32_t b_step = (plane_mma + 32 * ks) >> 4;
      const uint64_t a_hi = desc(d_a + a_step);
      const uint64_t a_lo = desc(d_a + a_step + (kPlaneBytes >> 4));
      const uint64_t b_hi = desc(d_b + b_step);
      wgmma::plane_products<kBIsU8, decltype(first)::value>(
          acc_hi, acc_mid, acc_lo, a_hi, a_lo, b_hi, desc(d_b + b_step + (kPlaneBytes >> 4)));
    };
    static_assert(kWgmmaStageK == 64, "two k steps per stage");
    k_step(0, fresh);
    k_step(1, std::false_type{});
    wgmma::commit_group();
    issue_next(stage + kSlots, raw_issue);
    const uint32_t raw_split =
        raw_issue + kBRawBytes == kSlots * kBRawBytes ? 0u : raw_issue + kBRawBytes;
    const uint32_t plane_split =
        plane_mma + kBPlaneBytes == kDeepPlaneSlots * kBPlaneBytes ? 0u : plane_mma + kBPlaneBytes;
    // Stage + 1 (stale past the end: never read). Read after the copy issue, whose tile changes
    // (the column decode) would otherwise run with these 16 registers live beside 192
    // accumulators.
    split_b(b_raw + raw_split, b_planes + plane_split);
    raw_issue = raw_split;
    plane_mma = plane_split;
    ++stage;
  };
  // Stage + 2 has landed and the split planes are visible to every warpgroup's wgmmas.
  auto stage_barrier = [&] {
    cp_async_wait<kSlots - 2>();
    wgmma::fence_proxy_async_shared();
    __syncthreads();
  };

#pragma unroll 1
  for (int tile = 0; tile < tile_count; ++tile) {
    run_stage(std::true_type{}, 0);
#pragma unroll 1
    for (int si = 1; si < stages; ++si) {
      wgmma::wait_group<1>();
      stage_barrier();
      run_stage(std::false_type{}, si);
    }
    wgmma::wait_group<0>();
    wgmma::pin_registers(acc_hi);
    if constexpr (!kBIsU8) wgmma::pin_registers(acc_mid);
    wgmma::pin_registers(acc_lo);
    if (active) {
      if constexpr (kCombineFirst) {
        // H and L of every value first, in place: 128 independent multiply-adds, after which
        // acc_hi's 64 registers are free for the rounding's values in flight.
        combine_byte_products_in_place(acc_hi, acc_mid, acc_lo, rounding);
      }
      const int64_t col0 = int64_t(first_n + tile * ctas_per_row) * kWgmmaTileN;
      const int64_t cols_left = p.n - col0;
      const int cols = static_cast<int>(cols_left < kWgmmaTileN ? cols_left : kWgmmaTileN);
      int16_t* const out0 = out_warp + (lane >> 2) * rs + 2 * (lane & 3) + col0;
      // The extremes of the stored (saturated) values, as pairs of int16 lanes: one three-way
      // max and one min per four values.
      uint32_t pair_max = 0x80008000u, pair_min = 0x7fff7fffu;
      // Accumulators 4j + 2r and 4j + 2r + 1: row + 8r, columns 8j + 2·(lane % 4) + {0, 1}.
      auto store_pair = [&](int j, int r) {
        const uint32_t packed = pack_saturated(rounded(4 * j + 2 * r), rounded(4 * j + 2 * r + 1));
        pair_max = __vimax3_s16x2(pair_max, packed, packed);
        pair_min = __vimin3_s16x2(pair_min, packed, packed);
        *reinterpret_cast<uint32_t*>(out0 + 8 * r * rs + 8 * j) = packed;
      };
      if (warp_rows_ok && cols == kWgmmaTileN && staged) {
        // Both rows and every column inside: unguarded, through the warp's staging rows (with
        // guards, ptxas computed each value twice, once for the extremes and again inside each
        // store's branch). Staging row i is the warp's row i (lane / 4 + 8r).
        int16_t* const warp_out = out_warp + col0;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
#pragma unroll
          for (int jj = 0; jj < 8; ++jj) {
            const int i = 4 * (8 * half + jj);
            const uint32_t row0 = pack_saturated(rounded(i), rounded(i + 1));
            const uint32_t row8 = pack_saturated(rounded(i + 2), rounded(i + 3));
            pair_max = __vimax3_s16x2(pair_max, row0, row8);
            pair_min = __vimin3_s16x2(pair_min, row0, row8);
            const uint32_t at =
                staging + (lane >> 2) * kShallowStagePitch + 16 * jj + 4 * (lane & 3);
            sts32(at, row0);
            sts32(at + 8 * kShallowStagePitch, row8);
          }
          store_staged_rows(staging, warp_out, rs, half, lane);
        }
      } else {
        // Edge tiles (and rows that are not 16-byte aligned): word stores, guarded.
#pragma unroll
        for (int j = 0; j < 16; ++j) {
          if (8 * j + 2 * (lane & 3) >= cols) continue;
          if (row_ok0) store_pair(j, 0);
          if (row_ok1) store_pair(j, 1);
        }
      }
      add_stashed_tile_stats(stash, pair_max, pair_min, rounded, lane, cols, row_ok0, row_ok1);
    }
    stage_barrier();
  }
}

// p.k = 64 · stages (taps · channel blocks ≤ kShallowMaxStages); p.tiles_m divides gridDim.x:
// CTA b owns tile row b % tiles_m and columns b / tiles_m, + gridDim.x / tiles_m, …
// The host sends only flex16 outputs with alpha 1, beta 0 and no K split, a unit column stride
// and 4-byte aligned column pairs, and shifts 10 ≤ scale ≤ 31 (int16 B) or 1 ≤ scale ≤ 31 (u8 B).
// kAStages: the most stages the A region holds (1 or kShallowMaxStages).
template <bool kBIsU8, bool kAKContig, int kAStages>
__global__ void __launch_bounds__(kWgmmaThreads, 1)
    gemm_shallow_kernel(const __grid_constant__ IntegerGemmArgs p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using BElement = std::conditional_t<kBIsU8, uint8_t, int16_t>;
  using Splitter = LeanSplitter<kBIsU8, kAKContig, false, kWgmmaTileN>;
  constexpr int kSlots = shallow_raw_slots(kBIsU8, kAStages);
  constexpr uint32_t kBRawBytes = shallow_b_raw_bytes(kBIsU8);
  constexpr uint32_t kBPlaneBytes = shallow_b_plane_bytes(kBIsU8);

  extern __shared__ unsigned char smem_raw[];
  const uint32_t smem_address = aligned_shared_address(smem_raw);
  const uint32_t a_region = smem_address;  // stage s at + s · 16 KB: high plane, then low
  const uint32_t b_raw = a_region + kAStages * kShallowAStageBytes;
  const uint32_t b_planes = b_raw + kSlots * kBRawBytes;
  const uint32_t staging_region = b_planes + kDeepPlaneSlots * kBPlaneBytes;
  const uint32_t staging = staging_region + (threadIdx.x >> 5) * 16 * kShallowStagePitch;
  ThreadStash stash;
  stash.init(staging_region + kShallowStageBytes);

  const ConvGather& g = p.gather;
  // (The host launches the one-stage form only for K of one stage.)
  const int stages = kAStages == 1 ? 1 : static_cast<int>(p.k / kWgmmaStageK);
  const int tiles_m = p.tiles_m;
  const int tile_m = static_cast<int>(blockIdx.x) % tiles_m;
  const int ctas_per_row = static_cast<int>(gridDim.x) / tiles_m;
  const int first_n = static_cast<int>(blockIdx.x) / tiles_m;
  if (first_n >= p.tiles_n) return;
  const int tile_count = (p.tiles_n - first_n + ctas_per_row - 1) / ctas_per_row;
  const int total = tile_count * stages;
  const int64_t row0 = int64_t(tile_m) * kWgmmaTileM;
  const int rows_a = static_cast<int>(p.m - row0 < kWgmmaTileM ? p.m - row0 : kWgmmaTileM);

  // A: every stage of the tile row, copied raw into its stage of the A region.
  copy_a_stages<kAKContig>(p, a_region, row0, rows_a, stages);
  cp_async_commit();

  // B: one cursor over the CTA's stages in issue order (tile by tile), R stages ahead of the
  // wgmmas. The thread's column is decoded into (position, n) once per CTA and carried from tile
  // to tile (ctas_per_row · 128 columns further each time) without dividing.
  GatherCopy<BElement> gather;
  TapWalk walk;
  ColumnCursor cursor;
  cursor.init(g, GatherCopy<BElement>::chunk_column(int64_t(first_n) * kWgmmaTileN),
              int64_t(ctas_per_row) * kWgmmaTileN);
  auto save_cursor = [&] { stash_cursor(stash, cursor); };
  save_cursor();
  int issue_stage = 0;
  const BElement* const b_data = static_cast<const BElement*>(p.b.data);
  // Stage `next` of the CTA into raw slot `slot` (next < total: a copy; beyond: an empty group).
  auto issue_next = [&](int next, uint32_t slot) {
    if (next < total) {
      if (issue_stage == 0) {
        uint32_t w[ColumnCursor::kPositionWords];
        stash.load(kStashCursor, w);
        cursor.load_position(w);
        int64_t o64[3], n64;
        cursor.position(o64, n64);
        gather.init_at(g, cursor.col, o64, n64, p.n);
        cursor.advance(g);
        save_cursor();
        walk.init(g, 0);
      } else if constexpr (kAStages > 1) {
        gather = stash.load_object<GatherCopy<BElement>>(kStashGather);
      }
      gather.issue(b_raw + slot, b_data, g, walk, walk.channels(g));
      if (kAStages > 1 && issue_stage + 1 < stages) stash.save_object(kStashGather, gather);
      walk.advance(g);
      if (++issue_stage == stages) issue_stage = 0;
    }
    cp_async_commit();  // one group per slot, empty ones past the end
  };
  for (int i = 0; i < kSlots; ++i) issue_next(i, uint32_t(i) * kBRawBytes);

  Splitter splitter;
  splitter.init();
  using SplitRegs = typename Splitter::Regs;
  using BSplit = decltype(splitter.b);
  // Each stashed object inside its own words.
  static_assert(ColumnCursor::kPositionWords <= kStashSplit - kStashCursor &&
                sizeof(BSplit) <= 4 * (kStashStats - kStashSplit) &&
                sizeof(GatherCopy<BElement>) <= 4 * (kShallowStashWords - kStashGather));
  stash.save_object(kStashSplit, splitter.b);
  auto split_b = [&](uint32_t raw, uint32_t planes) {
    split_stashed_b<kBIsU8, BSplit, SplitRegs>(stash, raw, planes);
  };

  // A's group and B's stage 0 have landed: split A in place (every thread's raw reads of a stage
  // before anyone's plane writes), then B's stage 0 into plane slot 0.
  cp_async_wait<kSlots - 1>();
  __syncthreads();
  split_a_stages_in_place(splitter, a_region, stages);
  split_b(b_raw, b_planes);
  cp_async_wait<kSlots - 2>();
  wgmma::fence_proxy_async_shared();
  __syncthreads();

  run_lockstep_tiles<kBIsU8, kAStages>(p, stash, smem_address, a_region, b_raw, b_planes, staging,
                                       stages, first_n, ctas_per_row, tile_count, row0, rows_a,
                                       issue_next, split_b);
  cp_async_wait<0>();
  // Elements past the matrix are products of zero fill (0), so they move neither extreme.
  commit_stashed_stats(stash, p.stats);
#elif defined(__CUDA_ARCH__)
  __trap();  // the PTX fallback: never launched (prepare_shallow reports false)
#endif
}

template <bool kBIsU8, bool kAKContig, int kAStages>
bool prepare_shallow_one() {
  return prepare_sm90_kernel(gemm_shallow_kernel<kBIsU8, kAKContig, kAStages>,
                             shallow_smem_bytes(kBIsU8, kAStages));
}

template <bool kBIsU8, bool kAKContig, int kAStages>
void launch_shallow_one(dim3 grid, const IntegerGemmArgs& args, cudaStream_t stream) {
  gemm_shallow_kernel<kBIsU8, kAKContig, kAStages>
      <<<grid, kWgmmaThreads, shallow_smem_bytes(kBIsU8, kAStages), stream>>>(args);
  FLEXKIT_CUDA_CHECK_LAUNCH("gemm_shallow_kernel");
}

}  // namespace wgmma_detail
}  // namespace flexkit::backend::cuda::gemm_kernels
