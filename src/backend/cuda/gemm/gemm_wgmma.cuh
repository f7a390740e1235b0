// The sm_90a exact integer GEMM kernel (the shared-memory "SS" form).
//
// Each int16 mantissa m is split in registers into a signed high byte h = m >> 8 and an unsigned
// low byte l = m & 0xff (m = 256·h + l), so a·b = 65536·hₐh_b + 256·(hₐl_b + lₐh_b) + lₐl_b:
// three int32 accumulators per output (hh: s8×s8; cross: s8×u8 and u8×s8 into the same registers;
// ll: u8×u8), combined exactly in int64 at the end. For a u8 B there are two: hₐ·b and lₐ·b.
//
// Data path (every int16 element of A and B is read from global memory once per CTA):
//   global int16 → cp.async into a raw ring in shared memory (wgmma_ring.cuh, "The raw ring") →
//   registers → byte permutes → st.shared into K-major byte planes (64-byte swizzle, the layout
//   wgmma's 8-bit operands need) → fence.proxy.async + barrier → wgmma reads both operands from
//   shared memory.
// An operand whose unit stride runs along M or N is transposed on the way: an int16 one by
// ldmatrix.trans (LeanS16RowContigSplit), a u8 one by the permutes (4 k-rows × 8 rows per thread
// become 8 runs of 4 k-bytes).
//
// No warp specialisation: the split needs registers, and the accumulators already take 3 · 64
// of them per thread: 256 threads = 2 warpgroups, each owning 64 rows × 128 columns of the CTA
// tile. The raw ring keeps several stages of loads in flight, which is what covers ~1 µs of
// L2/HBM latency at tensor-core rate; gemm_wgmma_lean_kernel (see "The lean deep kernel") keeps
// the per-stage instruction count low and software-pipelines the split (raw reads well ahead of
// their permutes).
#pragma once
#include <cstdint>
#include <type_traits>

#include "backend/cuda/check.hpp"
#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/gemm/conv_gather.cuh"
#include "backend/cuda/gemm/gemm_kernel_args.cuh"
#include "backend/cuda/gemm/gemm_wgmma.hpp"
#include "backend/cuda/gemm/sm90_kernel_image.hpp"
#include "backend/cuda/gemm/stream_k_decode.cuh"
#include "backend/cuda/gemm/wgmma_epilogue.cuh"
#include "backend/cuda/gemm/wgmma_int8.cuh"
#include "backend/cuda/gemm/wgmma_ptx.cuh"
#include "backend/cuda/gemm/wgmma_raw_copies.cuh"
#include "backend/cuda/gemm/wgmma_ring.cuh"
#include "backend/cuda/gemm/wgmma_splitters.cuh"

namespace flexkit::backend::cuda::gemm_kernels {

// ---------------------------------------------------------------------------------------------
// The lean deep kernel (the default "ss"): the raw-ring pipeline with the per-stage instruction
// stream cut down. Measured on the H200, a first, plainer deep kernel spent ~690 warp
// instructions per 64-deep stage (3 300 cycles of issue against 1 024 tensor-core cycles): every
// stage recomputed each copy's 64-bit source address, its bound clamps and its swizzled
// destination, and divided by the run-time ring depth twice. Here:
//   - copies of interior tiles and full stages (all but edge CTAs and the K tail) take a path
//     with no guards: the per-thread source pointer and shared offsets are computed once per
//     CTA, and each stage only adds the k step and the slot; the guarded copies (copy_raw_stage)
//     run only where an operand tile crosses the matrix edge or the stage is the K tail;
//   - ring slots are running byte offsets (no `%` by the ring depth);
//   - the wgmma descriptors are built once and advanced by adding constants;
//   - the u8 transposing split's half-warp row flip is folded into the permute selectors (run-time
//     selectors cost nothing per stage) instead of 16 selects.

// The lean deep kernel (see above): the raw ring (wgmma_ring.cuh), `p.raw_stages` slots deep, in
// front of a 3-slot plane ring.
//
// Iteration s: issue the wgmmas of stage s (plane slot s % 3); issue the copies of stage s + R
// into raw slot s % R (stage s left it when it was split, in iteration s − 1, before that
// iteration's barrier); split raw stage s + 1 (landed and made visible by the previous barrier)
// into plane slot (s + 1) % 3, last read by the wgmmas of stage s − 2, which both warpgroups
// finished before the previous barrier; wait until raw stage s + 2 has landed (cp.async groups:
// one per stage, empty ones past the end, so "R − 2 pending" always means stage s + 2) and until
// at most one wgmma group is pending; barrier. R − 1 stages stay in flight while one is split.
// The split of stage s + 1 reads its raw words before the wgmmas and copies of stage s and
// permutes/stores them after (LeanSplitter), and a wide n-contiguous u8 B's extra rows are split
// by all eight warps. Stage s + 1's raw slot is complete since the barrier that ended iteration
// s − 1 (cp.async.wait + __syncthreads), so its A words can be read before anything else. The
// last iteration splits too (stale raw bytes into plane slot (s + 1) % 3, which no wgmma reads
// any more, and finish_tile reuses the shared memory only after the final barrier): a load and a
// store under a `stage + 1 < stage_count` guard made nvcc thread that branch through the wgmma
// and copy code between them, six copies of the loop body.
//
// kGather (implicit GEMM, see ConvGather): kGatherTaps gathers an n-contiguous B (no batch): K
// counts stages of the tap-major walk (p.k = 64 · taps · channel_stages) and every stage's copies
// go through the gather and A's per-stage offset. kGatherUpdate gathers a k-contiguous B, one tap
// per grid z ("batch": the output's batch stride steps taps), A as in a plain GEMM.
// kGatherUpdateStreamK is the same gather walking a stream-K schedule (IntegerGemmArgs::sk_ctas)
// instead of one grid tile: its own instantiation, because the work-item loop costs the
// one-tile launches 2-3 % (measured on fprop and bprop).
inline constexpr int kGatherNone = 0, kGatherTaps = 1, kGatherUpdate = 2, kGatherUpdateStreamK = 3;

namespace wgmma_detail {

// The CTA's work item number `index` into `item`; false past its last. Without stream-K that is
// the grid's one tile. A stream-K item is decoded by one thread into shared memory and read back
// (volatile) where it is used, so nothing of it stays in registers across the main loop beside
// the 192 accumulators.
template <bool kStreamK>
__device__ __forceinline__ bool next_work_item(const IntegerGemmArgs& p, int index,
                                               WorkItem& shared_item, int& shared_has_item,
                                               WorkItem& item) {
  if constexpr (!kStreamK) {
    if (index > 0) return false;
    grid_item(p, item);
  } else {
    __syncthreads();  // the previous item's end has read shared memory and shared_item
    if (threadIdx.x == 0) {
      WorkItem w;
      const bool has = stream_k_item(p, index, w);
      *static_cast<volatile int*>(&shared_has_item) = has ? 1 : 0;
      if (has) copy_work_item(static_cast<volatile WorkItem&>(shared_item), w);
    }
    __syncthreads();
    if (*static_cast<volatile int*>(&shared_has_item) == 0) return false;
    copy_work_item(item, static_cast<const volatile WorkItem&>(shared_item));
  }
  return true;
}

// The lean kernel's shared memory: a 3-slot plane ring, then the raw ring (wgmma_ring.cuh),
// `p.raw_stages` slots deep.
template <bool kBIsU8, int kTileN>
struct LeanRing {
  static constexpr int kStageBytes = deep_stage_bytes(kBIsU8, kTileN);  // a plane slot
  static constexpr int kAHi = 0, kALo = kPlaneBytes, kBHi = 2 * kPlaneBytes, kBLo = 3 * kPlaneBytes;
  static constexpr int kRawBytes = raw_stage_bytes(kBIsU8, kTileN);  // a raw slot
  static constexpr int kRawRing = kDeepPlaneSlots * kStageBytes;     // the raw ring's offset
  static constexpr uint32_t kPlaneRingBytes = kDeepPlaneSlots * kStageBytes;
  static constexpr int kDefaultRing = deep_max_raw_stages(kBIsU8, kTileN);
  static_assert(kDefaultRing >= 2 && kDefaultRing - 2 <= 7, "cp.async.wait_group immediate");
};

// What a variant of the lean kernel does: its work items (stream-K: the update form only, else
// one tile of the grid), its gathered B, and when it reads a stage's A words for the split.
template <bool kBIsU8, bool kBKContig, int kTileN, int kGather>
struct LeanVariant {
  static_assert(kTileN == kWgmmaTileN || (kBIsU8 && kTileN == kWideTileN), "tile widths");
  static_assert(kGather != kGatherTaps || (!kBKContig && kTileN == kWgmmaTileN),
                "tap-major gathered B: n-contiguous");
  static constexpr bool kStreamK = kGather == kGatherUpdateStreamK;
  static constexpr bool kUpdateGather = kGather == kGatherUpdate || kStreamK;
  static_assert(!kUpdateGather || (kBKContig && kTileN == kWgmmaTileN),
                "update gathered B: k-contiguous");
  // A's raw words across the wgmma and copy issue cost 16 registers there; where ptxas then
  // spills (the wide u8 tile with B n-contiguous: 2 · 96 accumulators and three transposing
  // splitters' offsets) the stage is split A then B, just the extra rows balanced.
  static constexpr bool kLoadAEarly = !(kBIsU8 && kTileN > kWgmmaTileN && !kBKContig);
};

// A tile's operands in global memory: A's and B's tiles at the item's first k (A's at k 0 where
// its stages are addressed per tap), their leading dimensions and the step of a stage along K.
template <bool kBIsU8>
struct LeanOperands {
  using BElement = std::conditional_t<kBIsU8, uint8_t, int16_t>;
  const int16_t* a_tile;
  const BElement* b_tile;
  int64_t a_ld, b_ld, a_stage_step, b_stage_step;

  template <bool kAKContig, bool kBKContig, bool kATapOffsets>
  __device__ __forceinline__ void init(const IntegerGemmArgs& p, int64_t batch, int64_t row0,
                                       int64_t col0, int64_t k_begin) {
    a_tile = static_cast<const int16_t*>(p.a.data) + batch * p.a.batch_stride +
             row0 * p.a.row_stride + (kATapOffsets ? 0 : k_begin * p.a.k_stride);
    b_tile = static_cast<const BElement*>(p.b.data) + batch * p.b.batch_stride +
             col0 * p.b.row_stride + k_begin * p.b.k_stride;
    a_ld = kAKContig ? p.a.row_stride : p.a.k_stride;
    b_ld = kBKContig ? p.b.row_stride : p.b.k_stride;
    a_stage_step = kWgmmaStageK * p.a.k_stride;
    b_stage_step = kWgmmaStageK * p.b.k_stride;
  }
};

// Zero accumulators (a u8 B has no cross products: acc_mid stays unused).
template <bool kBIsU8, int kAccs>
__device__ __forceinline__ void zero_accumulators(uint32_t (&acc_hi)[kAccs],
                                                  uint32_t (&acc_mid)[kAccs],
                                                  uint32_t (&acc_lo)[kAccs]) {
#pragma unroll
  for (int i = 0; i < kAccs; ++i) acc_hi[i] = acc_lo[i] = 0;
  if constexpr (!kBIsU8) {
#pragma unroll
    for (int i = 0; i < kAccs; ++i) acc_mid[i] = 0;
  }
}

// The end of a work item: finish_tile over the item's tile, for stream-K the item as it stands
// in shared memory (read back there, not kept in registers across the main loop).
template <bool kBIsU8, int kTileN, bool kStreamK>
__device__ __forceinline__ void finish_work_item(const IntegerGemmArgs& p, unsigned char* smem,
                                                 uint32_t (&acc_hi)[kTileN / 2],
                                                 uint32_t (&acc_mid)[kTileN / 2],
                                                 uint32_t (&acc_lo)[kTileN / 2], int64_t batch,
                                                 int64_t row0, int64_t col0, int rows_a, int rows_b,
                                                 const WorkItem& shared_item) {
  if constexpr (!kStreamK) {
    finish_tile<kBIsU8, kTileN>(p, smem, acc_hi, acc_mid, acc_lo, batch, row0, col0, rows_a,
                                rows_b);
  } else {
    WorkItem end;
    copy_work_item(end, static_cast<const volatile WorkItem&>(shared_item));
    const int64_t end_row0 = end.tile_m * kWgmmaTileM, end_col0 = end.tile_n * kTileN;
    finish_tile<kBIsU8, kTileN>(
        p, smem, acc_hi, acc_mid, acc_lo, end.batch, end_row0, end_col0,
        static_cast<int>(p.m - end_row0 < kWgmmaTileM ? p.m - end_row0 : kWgmmaTileM),
        static_cast<int>(p.n - end_col0 < kTileN ? p.n - end_col0 : kTileN), end.partial);
  }
}

}  // namespace wgmma_detail

template <bool kBIsU8, bool kAKContig, bool kBKContig, int kTileN = kWgmmaTileN,
          int kGather = kGatherNone>
__global__ void __launch_bounds__(kWgmmaThreads, 1)
    gemm_wgmma_lean_kernel(const __grid_constant__ IntegerGemmArgs p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace wgmma_detail;
  using BElement = std::conditional_t<kBIsU8, uint8_t, int16_t>;
  using Variant = LeanVariant<kBIsU8, kBKContig, kTileN, kGather>;
  constexpr bool kStreamK = Variant::kStreamK, kUpdateGather = Variant::kUpdateGather;
  // The finishing pass of the shared tiles may launch now: its blocks start as these CTAs (one
  // per multiprocessor) leave, and wait for the whole grid before they read a slot.
  if constexpr (kStreamK) allow_dependent_launch();
  using Ring = LeanRing<kBIsU8, kTileN>;
  constexpr int kStageBytes = Ring::kStageBytes, kRawBytes = Ring::kRawBytes;
  constexpr int kRawRing = Ring::kRawRing, kDefaultRing = Ring::kDefaultRing;
  const int raw_stages = p.raw_stages;

  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw_address = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  unsigned char* const smem = smem_raw + ((1024u - (raw_address & 1023u)) & 1023u);
  const uint32_t smem_address = static_cast<uint32_t>(__cvta_generic_to_shared(smem));

  // The CTA's work items: one tile (and K split) of the grid, or a stream-K schedule. A stream-K
  // item is decoded by one thread into shared memory and read back (volatile) where it is used,
  // so nothing of it stays in registers across the main loop beside the 192 accumulators.
  [[maybe_unused]] __shared__ WorkItem shared_item;
  [[maybe_unused]] __shared__ int shared_has_item;
#pragma unroll 1
  for (int item_index = 0;; ++item_index) {
    WorkItem item;
    if (!next_work_item<kStreamK>(p, item_index, shared_item, shared_has_item, item)) break;
    const int64_t batch = item.batch;
    const int64_t row0 = item.tile_m * kWgmmaTileM;
    const int64_t col0 = item.tile_n * kTileN;
    const int64_t k_begin = item.k_begin;
    const int64_t k_len = item.k_end - k_begin;
    const int stage_count = static_cast<int>((k_len + kWgmmaStageK - 1) / kWgmmaStageK);
    const int rows_a = static_cast<int>(p.m - row0 < kWgmmaTileM ? p.m - row0 : kWgmmaTileM);
    const int rows_b = static_cast<int>(p.n - col0 < kTileN ? p.n - col0 : kTileN);

    LeanOperands<kBIsU8> ops;
    ops.template init<kAKContig, kBKContig, kGather == kGatherTaps>(p, batch, row0, col0, k_begin);
    const int16_t* const a_tile = ops.a_tile;
    const BElement* const b_tile = ops.b_tile;
    const int64_t a_ld = ops.a_ld, b_ld = ops.b_ld;
    const int64_t a_stage_step = ops.a_stage_step, b_stage_step = ops.b_stage_step;
    auto k_valid = [&](int stage) {
      const int64_t left = k_len - int64_t(stage) * kWgmmaStageK;
      return static_cast<int>(left < kWgmmaStageK ? left : kWgmmaStageK);
    };

    // Copies: unguarded while the whole tile is inside the matrix and the stage is full (decided
    // once per stage, uniformly for the CTA); the guarded copies only at edges and the K tail.
    const bool interior = rows_a == kWgmmaTileM && rows_b == kTileN && !p.guarded_copies;
    const int full_stages = static_cast<int>(k_len / kWgmmaStageK);
    LeanCopy<int16_t, kAKContig, kWgmmaTileM> a_copy;
    LeanCopy<BElement, kBKContig, kTileN> b_copy;
    a_copy.init(a_tile, a_ld);
    b_copy.init(b_tile, b_ld);
    const int64_t a_stage_bytes = a_stage_step * int64_t(sizeof(int16_t));
    const int64_t b_stage_bytes = b_stage_step * int64_t(sizeof(BElement));
    const uint32_t raw_ring = smem_address + kRawRing;
    const uint32_t raw_ring_bytes = uint32_t(raw_stages) * kRawBytes;
    // Stages are issued strictly in order, so the fast path's pointers advance once per issue.
    [[maybe_unused]] GatherCopy<BElement> gather;
    [[maybe_unused]] TapWalk walk;
    [[maybe_unused]] int64_t a_first = 0;  // bytes from a stage's first element to a_copy's chunk 0
    [[maybe_unused]] GatherKCopy<BElement> gather_k;
    [[maybe_unused]] const BElement* const b_rows =
        static_cast<const BElement*>(p.b.data) + col0 * p.gather.channel_stride;
    if constexpr (kUpdateGather) gather_k.init(p.gather, batch, k_begin, k_len);
    if constexpr (kGather == kGatherTaps) {
      gather.init(p.gather, col0, p.n);
      walk.init(p.gather, k_begin / kWgmmaStageK);
      a_first = a_copy.src - reinterpret_cast<const unsigned char*>(a_tile);
    }
    auto issue_stage = [&](int stage, uint32_t slot) {
      const uint32_t raw = raw_ring + slot;
      if constexpr (kUpdateGather) {
        if (rows_a == kWgmmaTileM && stage < full_stages && !p.guarded_copies) {
          a_copy.issue(raw);
        } else {
          copy_raw_stage<int16_t, kAKContig>(raw, a_tile + stage * a_stage_step, a_ld, rows_a,
                                             k_valid(stage));
        }
        a_copy.src += a_stage_bytes;
        gather_k.issue(raw + kRawS16Bytes, b_rows, p.gather, rows_b);
        return;
      }
      if constexpr (kGather == kGatherTaps) {
        const int channels = walk.channels(p.gather);
        const int64_t a_offset = walk.a_offset;
        if (rows_a == kWgmmaTileM && channels == kWgmmaStageK && !p.guarded_copies) {
          a_copy.src = reinterpret_cast<const unsigned char*>(a_tile + a_offset) + a_first;
          a_copy.issue(raw);
        } else {
          copy_raw_stage<int16_t, kAKContig>(raw, a_tile + a_offset, a_ld, rows_a, channels);
        }
        gather.issue(raw + kRawS16Bytes, static_cast<const BElement*>(p.b.data), p.gather, walk,
                     channels);
        walk.advance(p.gather);
        return;
      }
      if (interior && stage < full_stages) {
        a_copy.issue(raw);
        b_copy.issue(raw + kRawS16Bytes);
      } else {
        copy_raw_stage<int16_t, kAKContig>(raw, a_tile + stage * a_stage_step, a_ld, rows_a,
                                           k_valid(stage));
        copy_raw_stage<BElement, kBKContig, kTileN>(
            raw + kRawS16Bytes, b_tile + stage * b_stage_step, b_ld, rows_b, k_valid(stage));
      }
      a_copy.src += a_stage_bytes;
      b_copy.src += b_stage_bytes;
    };

    // Split: the per-thread offsets of the transposing loaders once per CTA.
    LeanSplitter<kBIsU8, kAKContig, kBKContig, kTileN> splitter;
    using SplitRegs = typename LeanSplitter<kBIsU8, kAKContig, kBKContig, kTileN>::Regs;
    constexpr bool kLoadAEarly = Variant::kLoadAEarly;
    splitter.init();
    auto split_stage = [&](uint32_t raw_slot, uint32_t plane_slot) {
      const uint32_t raw_address = smem_address + kRawRing + raw_slot;
      const uint32_t base_address = smem_address + plane_slot;
      SplitRegs regs;
      splitter.load(raw_address, regs);
      splitter.store(regs, base_address);
    };

    // Descriptors of plane slot 0, advanced per stage and k step.
    PlaneDescriptors desc;
    desc.init(smem_address, Ring::kAHi, Ring::kALo, Ring::kBHi, Ring::kBLo);

    uint32_t acc_hi[kTileN / 2], acc_mid[kTileN / 2], acc_lo[kTileN / 2];
    zero_accumulators<kBIsU8>(acc_hi, acc_mid, acc_lo);

    for (int stage = 0; stage < raw_stages; ++stage) {
      if (stage < stage_count) issue_stage(stage, uint32_t(stage) * kRawBytes);
      cp_async_commit();
    }
    cp_async_wait_dynamic(raw_stages - 1);
    __syncthreads();
    split_stage(0, 0);
    cp_async_wait_dynamic(raw_stages - 2);
    wgmma::fence_proxy_async_shared();
    __syncthreads();

    // Ring positions as byte offsets: raw_issue holds stage s + R (= s % R), raw_split stage
    // s + 1, plane_mma stage s (s % 3), plane_split stage s + 1.
    uint32_t raw_issue = 0, raw_split = kRawBytes;  // raw_stages ≥ 2
    uint32_t plane_mma = 0, plane_split = kStageBytes;
#pragma unroll 1
    for (int stage = 0; stage < stage_count; ++stage) {
      const uint32_t slot = plane_mma >> 4;
      SplitRegs split_regs;  // stage s + 1's A words, read first (see above)
      const uint32_t split_raw = smem_address + kRawRing + raw_split;
      if constexpr (kLoadAEarly) splitter.load_a(split_raw, split_regs);
      wgmma::fence();
      plane_stage_wgmmas<kBIsU8, kTileN>(desc, slot, acc_hi, acc_mid, acc_lo);
      wgmma::commit_group();
      if (stage + raw_stages < stage_count) issue_stage(stage + raw_stages, raw_issue);
      cp_async_commit();
      const uint32_t planes = smem_address + plane_split;
      if constexpr (kLoadAEarly) {
        splitter.load_b(split_raw, split_regs);
        splitter.store(split_regs, planes);
      } else {
        splitter.load_a(split_raw, split_regs);
        splitter.store_a(split_regs, planes);
        splitter.load_b(split_raw, split_regs);
        splitter.store_b(split_regs, planes);
      }
      raw_issue = raw_issue + kRawBytes == raw_ring_bytes ? 0u : raw_issue + kRawBytes;
      raw_split = raw_split + kRawBytes == raw_ring_bytes ? 0u : raw_split + kRawBytes;
      plane_mma = plane_split;
      plane_split =
          plane_split + kStageBytes == Ring::kPlaneRingBytes ? 0u : plane_split + kStageBytes;
      cp_async_wait_ring<kDefaultRing>(raw_stages - 2);
      wgmma::wait_group<1>();
      wgmma::fence_proxy_async_shared();
      __syncthreads();
    }
    cp_async_wait<0>();
    finish_work_item<kBIsU8, kTileN, kStreamK>(p, smem, acc_hi, acc_mid, acc_lo, batch, row0, col0,
                                               rows_a, rows_b, shared_item);
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // the PTX fallback: never launched (prepare_wgmma reports false)
#endif
}

// Explicit instantiation + launch helpers for one element type of B: gemm_wgmma_lean_kernel.
// `wide`: the 192-column tile (a u8 B only).
template <bool kBIsU8>
bool prepare_wgmma_variant(bool a_k_contig, bool b_k_contig, bool wide);
template <bool kBIsU8>
void launch_wgmma_variant(bool a_k_contig, bool b_k_contig, bool wide, dim3 grid,
                          const IntegerGemmArgs& args, cudaStream_t stream);

namespace wgmma_detail {

template <bool kBIsU8, bool kAKContig, bool kBKContig, int kTileN, int kGather = kGatherNone>
bool prepare_one() {
  return prepare_sm90_kernel(gemm_wgmma_lean_kernel<kBIsU8, kAKContig, kBKContig, kTileN, kGather>,
                             deep_smem_bytes(kBIsU8, deep_max_raw_stages(kBIsU8, kTileN), kTileN));
}

template <bool kBIsU8, bool kAKContig, bool kBKContig, int kTileN, int kGather = kGatherNone>
void launch_one(dim3 grid, const IntegerGemmArgs& args, cudaStream_t stream) {
  gemm_wgmma_lean_kernel<kBIsU8, kAKContig, kBKContig, kTileN, kGather>
      <<<grid, kWgmmaThreads, deep_smem_bytes(kBIsU8, args.raw_stages, kTileN), stream>>>(args);
  FLEXKIT_CUDA_CHECK_LAUNCH("gemm_wgmma_lean_kernel");
}

template <bool kBIsU8, int kTileN>
bool prepare_layout(bool a_k_contig, bool b_k_contig) {
  if (a_k_contig) {
    return b_k_contig ? prepare_one<kBIsU8, true, true, kTileN>()
                      : prepare_one<kBIsU8, true, false, kTileN>();
  }
  return b_k_contig ? prepare_one<kBIsU8, false, true, kTileN>()
                    : prepare_one<kBIsU8, false, false, kTileN>();
}

template <bool kBIsU8, int kTileN>
void launch_layout(bool a_k_contig, bool b_k_contig, dim3 grid, const IntegerGemmArgs& args,
                   cudaStream_t stream) {
  if (a_k_contig) {
    if (b_k_contig) {
      launch_one<kBIsU8, true, true, kTileN>(grid, args, stream);
    } else {
      launch_one<kBIsU8, true, false, kTileN>(grid, args, stream);
    }
  } else if (b_k_contig) {
    launch_one<kBIsU8, false, true, kTileN>(grid, args, stream);
  } else {
    launch_one<kBIsU8, false, false, kTileN>(grid, args, stream);
  }
}

}  // namespace wgmma_detail

template <bool kBIsU8>
bool prepare_wgmma_variant(bool a_k_contig, bool b_k_contig, bool wide) {
  using namespace wgmma_detail;
  if constexpr (kBIsU8) {
    if (wide) return prepare_layout<kBIsU8, kWideTileN>(a_k_contig, b_k_contig);
  }
  return prepare_layout<kBIsU8, kWgmmaTileN>(a_k_contig, b_k_contig);
}

template <bool kBIsU8>
void launch_wgmma_variant(bool a_k_contig, bool b_k_contig, bool wide, dim3 grid,
                          const IntegerGemmArgs& args, cudaStream_t stream) {
  using namespace wgmma_detail;
  if constexpr (kBIsU8) {
    if (wide) return launch_layout<kBIsU8, kWideTileN>(a_k_contig, b_k_contig, grid, args, stream);
  }
  launch_layout<kBIsU8, kWgmmaTileN>(a_k_contig, b_k_contig, grid, args, stream);
}

}  // namespace flexkit::backend::cuda::gemm_kernels
