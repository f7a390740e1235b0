// The deep-K exact integer GEMM kernel (sm_90a): a small output over a long K, both operands
// int16 with K their unit stride. Its use: the filter gradient of a 1×1 convolution (gradF[c, k]
// = Σ_j E[k, j] · I[c, j] over every position and batch entry j), 64 × 256 outputs over 200 704
// values of j at 56 × 56 and batch 64. Such a product is a read of both operands and little else;
// the lean kernel ran it on stream-K over 128 × 128 tiles of which 64 columns held data, its
// threads splitting both operands into byte planes in lockstep.
//
// The output is cut into tiles of 128 rows of the larger side (the "A side") × 64 rows of the
// smaller (the "B side"), and K's 64-deep stages into as many interleaved sets (split i takes
// stages i, i + splits, …) as fill the machine with one CTA per multiprocessor. Each CTA runs one
// (tile, set) and adds its exact int64 sums into the workspace (integer addition is associative:
// the same bits in any order); the finishing pass (launch_finish_splits) rounds them. The
// workspace is one half of the stream's alternating_workspace, all zeros: the finishing pass of
// the call before set it back while it waited for its own kernel, so no call needs a memset.
//
// Measured on the H200 (1x1 56x56 update, ms per call with the workspace's memset and the
// finishing kernel): C64 K256 0.078 → 0.047 and C256 K64 0.085 → 0.049 against the lean
// stream-K kernel. Nsight Compute on C64 K256: this kernel 38.7 µs at 70 % of DRAM bandwidth,
// the finishing kernel 4 µs. Contiguous K ranges instead of interleaved sets: 40.2 µs. Raw rings
// of 4, 6 and 8 slots ran alike (so loads in flight are not what bounds it); most stall samples
// are the two roles' waits for a landed stage. Also measured and dropped: stages of two 64-k boxes
// (256 consecutive bytes of a row per request: no faster), and the kernel rounding its own
// outputs after a cooperative launch's CTAs of a tile waited for each other (0.047 → 0.049 and
// 0.050 → 0.054 ms: the wait for the slowest CTA cost more than the finishing kernel).
// The call is two kernels: no memset, and this kernel a programmatic dependent of the grid
// before it. Measured, same process, alternating: C64 K256 0.0460–0.0465 → 0.0418–0.0419 ms, C256
// K64 0.0497–0.0498 → 0.0456–0.0460 (the finishing pass then read each sum and set it back to
// zero; clearing the other half before its wait instead: 0.0422–0.0423 → 0.0416–0.0417 and
// 0.0420–0.0422 → 0.0414–0.0416, with the sums staged as below). The last
// CTA of each tile rounding the tile itself (one kernel a call) measured slower: globaltimer
// stamps put its first arrival at 38 µs, the tile's last 3–7 µs later, then its reads of the sums
// 4.6 µs, their rounding 4.3 µs and the statistics 1.5 µs (0.050 ms a call for C64 K256).
//
// Roles (384 threads: a producer warpgroup, two consumer warpgroups):
// - producer thread 0 loads each 64-deep stage as two TMA boxes of raw int16 (A side 128 × 64,
//   B side 64 × 64, 128-byte swizzle) into a ring of kRawSlots slots, kRawSlots − 2 stages ahead
//   of the split;
// - the producer's 128 threads split each stage's B box into a high (s8) and a low (u8) byte
//   plane, K-major in the 64-byte swizzle that wgmma's descriptors describe;
// - each consumer reads its 64 rows of the stage's A box straight into wgmma A fragments and
//   splits them there by byte permutes (the register-A "RS" form: the larger operand is never
//   written back to shared memory), then runs m64n64k32 wgmmas against the planes into three
//   sets of 32 int32 accumulators: hh (s8·s8), cross (s8·u8 + u8·s8) and ll (u8·u8).
// The int32 sums stay exact over at most kWgmmaMaxChunkK values of K per CTA (the host's
// splits keep them there).
#include <cuda.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "backend/cuda/alternating_workspace.hpp"
#include "backend/cuda/check.hpp"
#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/gemm/gemm_deep_k.hpp"
#include "backend/cuda/gemm/gemm_wgmma.hpp"
#include "backend/cuda/gemm/sm90_kernel_image.hpp"
#include "backend/cuda/gemm/tensor_map_encoder.hpp"
#include "backend/cuda/gemm/tma_pipeline.cuh"
#include "backend/cuda/gemm/wgmma_int8.cuh"
#include "flexkit/error.hpp"

namespace flexkit::backend::cuda::gemm_kernels {
namespace deep_k_detail {

inline constexpr int kTileA = 128;  // A-side rows of a CTA: two consumers of 64
inline constexpr int kTileB = 64;   // B-side rows of a CTA: a wgmma's N
inline constexpr int kStageK = kWgmmaStageK;
inline constexpr int kRowBytes =
    kStageK * 2;  // one raw row of a stage: 128 bytes, one swizzle span
inline constexpr int kRawABytes = kTileA * kRowBytes;
inline constexpr int kRawBBytes = kTileB * kRowBytes;
inline constexpr int kRawStageBytes = kRawABytes + kRawBBytes;
inline constexpr int kRawSlots = 6;
inline constexpr int kPlaneBytes = kTileB * kStageK;  // one byte plane of the B box
inline constexpr int kPlaneSlots = 4;
inline constexpr int kThreads = 384;
inline constexpr int kConsumerWarps = 8;
inline constexpr int kBarrierBytes = 8 * 2 * (kRawSlots + kPlaneSlots);
inline constexpr int kSmemBytes = kRawSlots * kRawStageBytes + kPlaneSlots * 2 * kPlaneBytes +
                                  kBarrierBytes + 1024;  // + slack to a 1024-byte boundary
static_assert(kSmemBytes <= 227 * 1024, "over the sm_90 shared-memory limit per block");
static_assert(kRawStageBytes % 1024 == 0 && kRawABytes % 1024 == 0 && kPlaneBytes % 1024 == 0,
              "the 128-byte swizzle repeats every 1024 bytes: boxes start on its boundary");

// Which tile pair and K range a CTA takes, from the host.
struct Schedule {
  int32_t tiles_a;  // 128-row tiles of the A side
  int32_t pairs;    // tiles_a · (64-row tiles of the B side)
  int32_t splits;   // K ranges per tile pair (≤ stages)
  int32_t stages;   // 64-deep stages of K
  int32_t a_rows, b_rows;
  int32_t swapped;  // the A side is the GEMM's B (its n rows), the B side its A
};

struct Maps {
  CUtensorMap a_side;
  CUtensorMap b_side;
};

// Offset of 16-byte chunk `chunk` of row `row` in a TMA box of 128-byte rows (128-byte swizzle).
__device__ __forceinline__ uint32_t raw_offset(int row, int chunk) {
  return uint32_t(row) * kRowBytes + 16u * uint32_t(chunk ^ (row & 7));
}

// High bytes (s8) and low bytes (u8) of four int16, in order.
__device__ __forceinline__ uint32_t high_bytes(uint2 v) {
  return __byte_perm(v.x, v.y, 0x7531);
}
__device__ __forceinline__ uint32_t low_bytes(uint2 v) {
  return __byte_perm(v.x, v.y, 0x6420);
}

// The CTA's shared memory from its 1024-byte boundary on: the raw ring, the plane ring, then the
// barriers of both.
struct DeepKRings {
  unsigned char* smem;  // the raw ring's start, as a generic pointer
  uint32_t ring, planes;
  uint32_t raw_full, raw_empty, plane_full, plane_empty;

  __device__ __forceinline__ void init(unsigned char* smem_raw) {
    const uint32_t raw_address = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
    const uint32_t pad = (1024u - (raw_address & 1023u)) & 1023u;
    smem = smem_raw + pad;
    ring = raw_address + pad;
    planes = ring + kRawSlots * kRawStageBytes;
    raw_full = planes + kPlaneSlots * 2 * kPlaneBytes;
    raw_empty = raw_full + 8 * kRawSlots;
    plane_full = raw_empty + 8 * kRawSlots;
    plane_empty = plane_full + 8 * kPlaneSlots;
  }
};

// The CTA's tile pair and its stages: split, split + splits, … (interleaved, so that the CTAs of
// a tile read neighbouring 128-byte runs of each row at about the same time: DRAM pages open
// once).
struct DeepKWork {
  int split, tile_a, tile_b;
  int count;  // the CTA's stages

  __device__ __forceinline__ void init(const Schedule& schedule) {
    const int pair = static_cast<int>(blockIdx.x) % schedule.pairs;
    split = static_cast<int>(blockIdx.x) / schedule.pairs;
    tile_a = pair % schedule.tiles_a;
    tile_b = pair / schedule.tiles_a;
    count = (schedule.stages - split + schedule.splits - 1) / schedule.splits;
  }
};

__device__ __forceinline__ void init_ring_barriers(const DeepKRings& rings) {
  if (threadIdx.x == 0) {
    for (int i = 0; i < kRawSlots; ++i) {
      tma::barrier_init(rings.raw_full + 8 * i, 1);  // the loading thread, plus the boxes' bytes
      tma::barrier_init(rings.raw_empty + 8 * i, kConsumerWarps + 4);  // every warp that reads it
    }
    for (int i = 0; i < kPlaneSlots; ++i) {
      tma::barrier_init(rings.plane_full + 8 * i, 128);              // every producer thread
      tma::barrier_init(rings.plane_empty + 8 * i, kConsumerWarps);  // a lane per consumer warp
    }
    tma::barrier_init_fence();
  }
}

// The producer warpgroup: thread 0 loads the CTA's stages into the raw ring, and all 128 threads
// split each stage's B box into its two byte planes.
__device__ __forceinline__ void run_producer(const Maps& maps, const Schedule& schedule,
                                             const DeepKRings& rings, const DeepKWork& work,
                                             int lane) {
  const int t = threadIdx.x;
  auto load = [&](int s) {  // stage s of the CTA's range into its raw slot
    const int slot = s % kRawSlots;
    const uint32_t full = rings.raw_full + 8 * slot;
    const uint32_t dst = rings.ring + slot * kRawStageBytes;
    const int32_t k0 = (work.split + s * schedule.splits) * kStageK;
    tma::arrive_expect_bytes(full, kRawStageBytes);
    tma::load_2d(dst, &maps.a_side, k0, work.tile_a * kTileA, full);
    tma::load_2d(dst + kRawABytes, &maps.b_side, k0, work.tile_b * kTileB, full);
  };
  const int count = work.count;
  if (t == 0) {
    tma::prefetch_map(&maps.a_side);
    tma::prefetch_map(&maps.b_side);
    for (int s = 0; s < count && s < kRawSlots; ++s) load(s);
  }
#pragma unroll 1
  for (int s = 0; s < count; ++s) {
    // Refill the slot of stage s − 2 (its readers are two stages ahead of this split).
    if (t == 0 && s >= 2 && s - 2 + kRawSlots < count) {
      const int old = s - 2;
      tma::wait(rings.raw_empty + 8 * (old % kRawSlots), uint32_t(old / kRawSlots) & 1u);
      load(old + kRawSlots);
    }
    const int slot = s % kRawSlots;
    const int plane = s % kPlaneSlots;
    tma::wait(rings.raw_full + 8 * slot, uint32_t(s / kRawSlots) & 1u);
    if (s >= kPlaneSlots)
      tma::wait(rings.plane_empty + 8 * plane, uint32_t(s / kPlaneSlots - 1) & 1u);
    const unsigned char* raw_b = rings.smem + slot * kRawStageBytes + kRawABytes;
    unsigned char* const high = rings.smem + (rings.planes - rings.ring) + plane * 2 * kPlaneBytes;
    unsigned char* const low = high + kPlaneBytes;
    // Chunk q = t + 128 i of the box: row q / 8, k 8 (q % 8) … + 7. A quarter-warp reads one
    // whole 128-byte row and writes 64 bytes of each plane: no bank conflicts.
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int q = t + 128 * i;
      const int row = q >> 3, chunk = q & 7;
      const uint4 v = *reinterpret_cast<const uint4*>(raw_b + raw_offset(row, chunk));
      const uint32_t at = wgmma::swizzle(uint32_t(row) * wgmma::kRowBytes + 8u * chunk);
      *reinterpret_cast<uint2*>(high + at) =
          make_uint2(high_bytes(make_uint2(v.x, v.y)), high_bytes(make_uint2(v.z, v.w)));
      *reinterpret_cast<uint2*>(low + at) =
          make_uint2(low_bytes(make_uint2(v.x, v.y)), low_bytes(make_uint2(v.z, v.w)));
    }
    wgmma::fence_proxy_async_shared();
    tma::arrive(rings.plane_full + 8 * plane);
    __syncwarp();
    if (lane == 0) tma::arrive(rings.raw_empty + 8 * slot);
  }
}

// A consumer warpgroup's stages: the 64 rows r − r % 16 … of the A side read straight into wgmma
// fragments and split there by byte permutes (the RS form), against the stage's B planes.
__device__ __forceinline__ void run_consumer_stages(const DeepKRings& rings, int count, int r,
                                                    int lane, uint32_t (&acc_hh)[32],
                                                    uint32_t (&acc_mid)[32],
                                                    uint32_t (&acc_ll)[32]) {
  const int t4 = lane & 3;
  // This thread's A-fragment rows: r and r + 8 of the box (r % 8 == lane / 4, so both share a
  // swizzle key and lie 1024 bytes apart). Half h of k-step ks is 16-byte chunk 4 ks + 2 h + t4 /
  // 2, its 8-byte half t4 % 2: k = 32 ks + 16 h + 4 t4 … + 3, the fragment's registers 2h and
  // 2h + 1.
  uint32_t fragment_offset[2][2];
#pragma unroll
  for (int ks = 0; ks < 2; ++ks)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      fragment_offset[ks][h] = raw_offset(r, 4 * ks + 2 * h + (t4 >> 1)) + 8u * (t4 & 1);

#pragma unroll
  for (int i = 0; i < 32; ++i) acc_hh[i] = acc_mid[i] = acc_ll[i] = 0;

  // A stage: its fragments into `frag` (high bytes in [0][ks], low in [1][ks]); `held` holds the
  // previous stage's. A wgmma reads its A registers until the wait_group that covers it, which
  // ptxas does not see: it reused the fragment registers of the stage still in flight for the
  // next stage's loads (wrong sums, differing from run to run). Two named sets, each read by an
  // empty asm after the wait that frees it, keep both stages' fragments in their own registers.
  using Fragments = uint32_t[2][2][4];
  auto run_stage = [&](int s, Fragments& frag, Fragments& held) {
    const int slot = s % kRawSlots;
    const int plane = s % kPlaneSlots;
    tma::wait(rings.raw_full + 8 * slot, uint32_t(s / kRawSlots) & 1u);
    const unsigned char* raw_a = rings.smem + slot * kRawStageBytes;
#pragma unroll
    for (int ks = 0; ks < 2; ++ks)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint2 v0 = *reinterpret_cast<const uint2*>(raw_a + fragment_offset[ks][h]);
        const uint2 v1 = *reinterpret_cast<const uint2*>(raw_a + fragment_offset[ks][h] + 1024);
        frag[0][ks][2 * h] = high_bytes(v0);
        frag[0][ks][2 * h + 1] = high_bytes(v1);
        frag[1][ks][2 * h] = low_bytes(v0);
        frag[1][ks][2 * h + 1] = low_bytes(v1);
      }
    // The fragments are in registers: the raw slot may be refilled.
    __syncwarp();
    if (lane == 0) tma::arrive(rings.raw_empty + 8 * slot);
      // Computed before wgmma.fence, so that the permutes are not sunk past it.
#pragma unroll
    for (int ks = 0; ks < 2; ++ks)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        asm volatile("" : "+r"(frag[0][ks][i]), "+r"(frag[1][ks][i])::"memory");
    const uint32_t plane_high = rings.planes + plane * 2 * kPlaneBytes;
    tma::wait(rings.plane_full + 8 * plane, uint32_t(s / kPlaneSlots) & 1u);
    wgmma::fence();
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) {
      const uint64_t b_high = wgmma::descriptor(plane_high + 32 * ks);
      const uint64_t b_low = wgmma::descriptor(plane_high + kPlaneBytes + 32 * ks);
      wgmma::wgmma_rs_m64n64k32_s8s8(acc_hh, frag[0][ks], b_high);
      wgmma::wgmma_rs_m64n64k32_s8u8(acc_mid, frag[0][ks], b_low);
      wgmma::wgmma_rs_m64n64k32_u8s8(acc_mid, frag[1][ks], b_high);
      wgmma::wgmma_rs_m64n64k32_u8u8(acc_ll, frag[1][ks], b_low);
    }
    wgmma::commit_group();
    wgmma::wait_group<1>();
    // The wgmmas of stage s − 1 are done: its fragments may be overwritten, its planes rewritten.
#pragma unroll
    for (int ks = 0; ks < 2; ++ks)
#pragma unroll
      for (int i = 0; i < 4; ++i) asm volatile("" ::"r"(held[0][ks][i]), "r"(held[1][ks][i]));
    if (s > 0 && lane == 0) tma::arrive(rings.plane_empty + 8 * ((s - 1) % kPlaneSlots));
  };
  Fragments even = {}, odd = {};
#pragma unroll 1
  for (int s = 0; s < count; s += 2) {
    run_stage(s, even, odd);
    if (s + 1 < count) run_stage(s + 1, odd, even);
  }
  wgmma::wait_group<0>();
  wgmma::pin_registers(acc_hh);
  wgmma::pin_registers(acc_mid);
  wgmma::pin_registers(acc_ll);
}

// The consumers' 128 × 64 sums, combined in int64, added into the workspace. They go through
// shared memory, so that each reduction a warp issues covers 32 consecutive words of the
// workspace (256 bytes, 8 sectors, two 128-byte lines). Straight from the accumulator layout one
// instruction spans 8 rows × 4 words: 16 sectors where the workspace runs along the B side, 8
// sectors in four lines where it runs along the A side. Measured on the H200 (1x1 56x56 update,
// ms a call, same process, alternating): C256 K64 0.0457–0.0459 → 0.0414–0.0416, C64 K256
// 0.0419–0.0421 → 0.0416–0.0417.
__device__ __forceinline__ void add_sums_to_workspace(const IntegerGemmArgs& p,
                                                      const Schedule& schedule, unsigned char* smem,
                                                      const DeepKWork& work, int consumer_warp,
                                                      int r, int lane, const uint32_t (&acc_hh)[32],
                                                      const uint32_t (&acc_mid)[32],
                                                      const uint32_t (&acc_ll)[32]) {
  const int t4 = lane & 3;
  // Every consumer is past its last read of the raw ring, and no load is in flight.
  asm volatile("bar.sync 1, 256;\n" ::: "memory");
  uint64_t* const staged = reinterpret_cast<uint64_t*>(smem);
  // Word (a, b) of the block (a < 128 on the A side, b < 64 on the B side) at a · 64 + (b ^ (a %
  // 16)): 32 consecutive a at one b, or 32 consecutive b at one a, fall in 16 different 8-byte
  // bank pairs per half-warp.
  auto at = [](int a, int b) { return a * kTileB + (b ^ (a & 15)); };
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const int a = r + 8 * ((i >> 1) & 1), b = 8 * (i >> 2) + 2 * t4 + (i & 1);
    staged[at(a, b)] =
        static_cast<uint64_t>(int64_t(int32_t(acc_hh[i])) * 65536 +
                              int64_t(int32_t(acc_mid[i])) * 256 + int64_t(int32_t(acc_ll[i])));
  }
  asm volatile("bar.sync 1, 256;\n" ::: "memory");
  const bool along_b = (schedule.swapped != 0) == rows_are_unit_stride(p.c);
  const int a0 = work.tile_a * kTileA, b0 = work.tile_b * kTileB;
  // Run j of this warp (32 of the block's 256): 32 words along the workspace's unit stride.
#pragma unroll 4
  for (int j = 0; j < 32; ++j) {
    const int run = consumer_warp * 32 + j;
    const int a = along_b ? run >> 1 : 32 * (run & 3) + lane;
    const int b = along_b ? 32 * (run & 1) + lane : run >> 2;
    const uint64_t sum = staged[at(a, b)];
    const int a_row = a0 + a, b_row = b0 + b;
    if (sum == 0 || a_row >= schedule.a_rows || b_row >= schedule.b_rows) continue;
    const int64_t index = along_b ? int64_t(a_row) * schedule.b_rows + b_row
                                  : int64_t(b_row) * schedule.a_rows + a_row;
    atomicAdd(p.workspace + index, static_cast<unsigned long long>(sum));
  }
}

__global__ void __launch_bounds__(kThreads, 1)
    gemm_deep_k_kernel(const __grid_constant__ IntegerGemmArgs p, const __grid_constant__ Maps maps,
                       const Schedule schedule) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem_raw[];
  DeepKRings rings;
  rings.init(smem_raw);

  // The finishing pass may launch now: its blocks start as these CTAs (one per multiprocessor)
  // leave, and wait for the whole grid before they read the workspace.
  allow_dependent_launch();
  DeepKWork work;
  work.init(schedule);
  init_ring_barriers(rings);
  // Launched as a programmatic dependent (dependent_launch.cuh): nothing above touched global
  // memory; the operands, the workspace and the output may be the grid before's.
  wait_for_prerequisite_grid();
  __syncthreads();

  const int warpgroup = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x >> 7), 0);
  const int lane = threadIdx.x & 31;
  if (warpgroup == 0) {
    run_producer(maps, schedule, rings, work, lane);
    return;
  }

  const int consumer = warpgroup - 1;
  const int warp = (threadIdx.x >> 5) & 3;
  const int r = 64 * consumer + 16 * warp + (lane >> 2);  // the thread's first A-side row
  uint32_t acc_hh[32], acc_mid[32], acc_ll[32];
  run_consumer_stages(rings, work.count, r, lane, acc_hh, acc_mid, acc_ll);
  add_sums_to_workspace(p, schedule, rings.smem, work, consumer * 4 + warp, r, lane, acc_hh,
                        acc_mid, acc_ll);
#endif
}

// A (rows × k) int16 operand with unit K stride as a 2-D map: boxes of 64 k × box_rows rows,
// 128-byte swizzle, zeros past either end. No L2 sector promotion: measured on the H200 (1x1 C64
// K256 56x56 update) 0.048 → 0.047 ms without the 256-byte promotion.
CUtensorMap encode(const OperandView& o, int64_t rows, int64_t k, int box_rows) {
  return encode_int16_rows(o.data, rows, k, o.row_stride, kStageK, box_rows, "operand");
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace deep_k_detail

bool deep_k_fits(const IntegerGemmArgs& a, int sms) {
  using namespace deep_k_detail;
  auto plain = [](const OperandView& o, int64_t rows) {
    return o.k_stride == 1 && reinterpret_cast<uintptr_t>(o.data) % 16 == 0 &&
           (rows == 1 || (o.row_stride % 8 == 0 && o.row_stride > 0));
  };
  if (a.b_is_u8 || a.m < 1 || a.n < 1 || a.k < 1 || !plain(a.a, a.m) || !plain(a.b, a.n))
    return false;
  const int64_t a_rows = std::max(a.m, a.n), b_rows = std::min(a.m, a.n);
  if (b_rows > kTileB || a.k > INT32_MAX - kStageK || a_rows > INT32_MAX) return false;
  return ceil_div(a_rows, kTileA) * 2 <= sms;
}

bool prepare_deep_k() {
  using namespace deep_k_detail;
  return prepare_sm90_kernel(gemm_deep_k_kernel, kSmemBytes);
}

void launch_deep_k(const IntegerGemmArgs& call, int device, int sms, cudaStream_t stream) {
  using namespace deep_k_detail;
  IntegerGemmArgs args = call;
  const bool swapped = args.n > args.m;
  const OperandView& a_side = swapped ? args.b : args.a;
  const OperandView& b_side = swapped ? args.a : args.b;
  Schedule schedule{};
  schedule.a_rows = static_cast<int32_t>(swapped ? args.n : args.m);
  schedule.b_rows = static_cast<int32_t>(swapped ? args.m : args.n);
  schedule.swapped = swapped ? 1 : 0;
  schedule.tiles_a = static_cast<int32_t>(ceil_div(schedule.a_rows, kTileA));
  schedule.pairs = schedule.tiles_a * static_cast<int32_t>(ceil_div(schedule.b_rows, kTileB));
  const int64_t stages = ceil_div(args.k, kStageK);
  // As many K ranges as give every multiprocessor one CTA, none past the int32 sums' exact range.
  const int64_t shortest = ceil_div(stages, kWgmmaMaxChunkK / kStageK);
  const int64_t splits =
      std::min<int64_t>(stages, std::max<int64_t>(shortest, std::max(1, sms / schedule.pairs)));
  schedule.splits = static_cast<int32_t>(splits);
  schedule.stages = static_cast<int32_t>(stages);
  Maps maps;
  maps.a_side = encode(a_side, schedule.a_rows, args.k, kTileA);
  maps.b_side = encode(b_side, schedule.b_rows, args.k, kTileB);
  // Taken once nothing but the two launches is left: taking it swaps the halves for the next
  // call, which then counts on this call's finishing pass to clear the stale one.
  const AlternatingWorkspace workspace =
      alternating_workspace(device, stream, static_cast<std::size_t>(args.m * args.n));
  args.workspace = workspace.sums;
  const dim3 grid(static_cast<unsigned>(int64_t(schedule.pairs) * splits));
  launch_dependent(true, gemm_deep_k_kernel, grid, dim3(kThreads), kSmemBytes, stream, args, maps,
                   schedule);
  // The call's last kernel: rounds the sums, clears the other half (the call before's sums), and
  // publishes the statistics.
  launch_finish_splits(args, args.m * args.n, device, stream, workspace.stale,
                       workspace.stale_words);
}

}  // namespace flexkit::backend::cuda::gemm_kernels
