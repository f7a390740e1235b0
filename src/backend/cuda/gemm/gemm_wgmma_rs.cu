// The sm_90a exact integer GEMM kernel with A in registers (wgmma "RS" form), for a k-contiguous
// A (the host transposes a tt problem into an nn one to get there).
//
// Why: the shared-memory kernel (gemm_wgmma.cuh) reads A and B from shared memory for every
// wgmma and writes all four byte planes with st.shared, which puts it at the shared-memory
// bandwidth ceiling (~128 B/clk/SM) well before the tensor cores'. Here each warpgroup reads its
// own 64 rows of A (from the raw ring) straight into the wgmma A-fragment layout and splits them
// into high/low bytes with byte permutes in registers: shared memory carries only B (written
// once per CTA and stage, read by the wgmmas), about half the traffic.
//
// A fragment of one k32 step (see wgmma_int8.cuh): a thread needs, for rows g and g + 8 of its
// warp's 16 rows (g = lane / 4), the int16 at k = 4t … 4t+3 and 16 + 4t … +3 (t = lane % 4):
// four 8-byte loads per k32 step. Splitting 4 int16 (two words) gives one word of high
// bytes (s8) and one of low bytes (u8), each already in fragment order.
//
// Both operands are streamed through the raw cp.async ring of gemm_wgmma.cuh, several stages
// deep (gemm_wgmma_rs_deep_kernel, FLEXKIT_GEMM_KERNEL=rs); B goes through the same loaders,
// swizzled 64-byte K-major planes and stage depth (K 64) as the shared-memory kernel.
#include <cstdint>
#include <type_traits>

#include "backend/cuda/gemm/gemm_wgmma.cuh"

namespace flexkit::backend::cuda::gemm_kernels {
namespace wgmma_rs_detail {

using wgmma_detail::kPlaneBytes;

__host__ __device__ constexpr int b_stage_bytes(bool b_is_u8) {
  return (b_is_u8 ? 1 : 2) * kPlaneBytes;
}

// Fragments are computed before wgmma.fence: otherwise the compiler may sink the byte permutes
// past it, and ptxas then has to inject extra warpgroup synchronisation before the wgmmas.
__device__ __forceinline__ void pin_fragment(uint32_t (&f)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(f[i])::"memory");
}

// The deep register-A kernel: both operands arrive through the raw cp.async ring (gemm_wgmma.cuh,
// "The raw ring"), R = p.raw_stages slots of raw A (k-contiguous int16) and raw B, in front of a
// 2-slot ring of B planes. A's fragments are read from the raw slot with 8-byte ld.shared (the
// raw layout's swizzle keeps them conflict-free) and split in registers; B is split into its
// planes one stage ahead, as in the shared-memory kernel.
//
// A raw slot serves two iterations: B of stage s is split in iteration s − 1, A of stage s is read
// in iteration s. So iteration s refills slot (s − 1) % R with stage s + R − 1, and waits at its
// end until stage s + 2 has landed (R − 3 groups pending; one group per stage, empty past the
// end): R − 2 stages in flight.
inline constexpr int kDeepBSlots = 2;

__host__ __device__ constexpr int deep_smem_bytes(bool b_is_u8, int raw_stages) {
  using namespace wgmma_detail;
  return (kDeepBSlots * b_stage_bytes(b_is_u8) + raw_stages * raw_stage_bytes(b_is_u8) >
                  kAccumulatorTileBytes
              ? kDeepBSlots * b_stage_bytes(b_is_u8) + raw_stages * raw_stage_bytes(b_is_u8)
              : kAccumulatorTileBytes) +
         kAlignSlack;
}
__host__ __device__ constexpr int deep_max_raw_stages(bool b_is_u8) {
  using namespace wgmma_detail;
  return (kSmemLimit - kAlignSlack - kDeepBSlots * b_stage_bytes(b_is_u8)) /
         raw_stage_bytes(b_is_u8);
}
static_assert(deep_max_raw_stages(false) >= 3 && deep_max_raw_stages(true) >= 3,
              "the raw ring needs 3 slots");

// Half ks (k 32·ks … +31) of this thread's A fragment rows from a raw k-contiguous slot: the same
// registers, row g + 8·(j & 1) and k = 32·ks + 16·(j >> 1) + 4t … +3 of the stage in v[j].
__device__ __forceinline__ void load_a_raw(uint2 (&v)[4], const unsigned char* raw, int row,
                                           int ks) {
  const int t = threadIdx.x & 3;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int r = row + 8 * (j & 1);
    const int chunk = 4 * ks + 2 * (j >> 1) + (t >> 1);
    v[j] = wgmma_detail::load_raw_vector<uint2>(
        raw, wgmma_detail::raw_kcontig_s16_offset(r, chunk) + 8 * (t & 1));
  }
}

__device__ __forceinline__ void split_a(const uint2 (&v)[4], uint32_t (&hi)[4], uint32_t (&lo)[4]) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    hi[j] = __byte_perm(v[j].x, v[j].y, 0x7531);
    lo[j] = __byte_perm(v[j].x, v[j].y, 0x6420);
  }
}

}  // namespace wgmma_rs_detail

template <bool kBIsU8, bool kBKContig>
__global__ void __launch_bounds__(kWgmmaThreads, 1)
    gemm_wgmma_rs_deep_kernel(const __grid_constant__ IntegerGemmArgs p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace wgmma_detail;
  using namespace wgmma_rs_detail;
  using BElement = std::conditional_t<kBIsU8, uint8_t, int16_t>;
  using BLoader = std::conditional_t<kBIsU8, std::conditional_t<kBKContig, U8KContig, U8RowContig>,
                                     std::conditional_t<kBKContig, S16KContig, S16RowContig>>;
  constexpr int kBStageBytes = b_stage_bytes(kBIsU8);
  constexpr int kBHi = 0, kBLo = kPlaneBytes;
  constexpr int kRawBytes = raw_stage_bytes(kBIsU8);
  constexpr int kRawRing = kDeepBSlots * kBStageBytes;  // the raw ring follows the B planes
  const int raw_stages = p.raw_stages;

  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw_address = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  unsigned char* const smem = smem_raw + ((1024u - (raw_address & 1023u)) & 1023u);
  const uint32_t smem_address = static_cast<uint32_t>(__cvta_generic_to_shared(smem));

  int64_t tile_m, tile_n;
  grouped_tile(blockIdx.x, p.tiles_m, p.tiles_n, tile_m, tile_n);
  const int64_t batch = p.batch_offset + blockIdx.z;
  const int64_t row0 = tile_m * kWgmmaTileM;
  const int64_t col0 = tile_n * kWgmmaTileN;
  const int64_t k_begin = int64_t(blockIdx.y) * p.k_chunk;
  const int64_t k_end = p.k < k_begin + p.k_chunk ? p.k : k_begin + p.k_chunk;
  const int64_t k_len = k_end - k_begin;
  const int stage_count = static_cast<int>((k_len + kWgmmaStageK - 1) / kWgmmaStageK);
  const int rows_a = static_cast<int>(p.m - row0 < kWgmmaTileM ? p.m - row0 : kWgmmaTileM);
  const int rows_b = static_cast<int>(p.n - col0 < kWgmmaTileN ? p.n - col0 : kWgmmaTileN);
  auto k_valid = [&](int stage) {
    const int64_t left = k_len - int64_t(stage) * kWgmmaStageK;
    return static_cast<int>(left < kWgmmaStageK ? left : kWgmmaStageK);
  };

  const int16_t* const a_tile = static_cast<const int16_t*>(p.a.data) + batch * p.a.batch_stride +
                                row0 * p.a.row_stride + k_begin;
  const BElement* const b_tile = static_cast<const BElement*>(p.b.data) + batch * p.b.batch_stride +
                                 col0 * p.b.row_stride + k_begin * p.b.k_stride;
  const int64_t b_ld = kBKContig ? p.b.row_stride : p.b.k_stride;
  const int64_t b_stage_step = kWgmmaStageK * p.b.k_stride;

  const int warpgroup = threadIdx.x >> 7;
  const int lane = threadIdx.x & 31;
  const int a_row = 64 * warpgroup + 16 * ((threadIdx.x >> 5) & 3) + (lane >> 2);

  auto raw_slot = [&](int stage) { return kRawRing + (stage % raw_stages) * kRawBytes; };
  auto issue_stage = [&](int stage) {
    const uint32_t raw = smem_address + raw_slot(stage);
    copy_s16_kcontig(raw, a_tile + int64_t(stage) * kWgmmaStageK, p.a.row_stride, rows_a,
                     k_valid(stage));
    copy_raw_stage<BElement, kBKContig>(raw + kRawS16Bytes, b_tile + stage * b_stage_step, b_ld,
                                        rows_b, k_valid(stage));
  };
  auto split_b = [&](int stage) {
    BLoader b_loader;
    b_loader.load_raw(smem + raw_slot(stage) + kRawS16Bytes);
    unsigned char* const base = smem + (stage % kDeepBSlots) * kBStageBytes;
    if constexpr (kBIsU8) {
      b_loader.store(base + kBHi);
    } else {
      b_loader.store(base + kBHi, base + kBLo);
    }
  };

  uint32_t acc_hi[64], acc_mid[64], acc_lo[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc_hi[i] = acc_lo[i] = 0;
  if constexpr (!kBIsU8) {
#pragma unroll
    for (int i = 0; i < 64; ++i) acc_mid[i] = 0;
  }

  // Stages 0 … R − 2 in flight; split B(0); stage 1 landed before the loop.
  for (int stage = 0; stage < raw_stages - 1; ++stage) {
    if (stage < stage_count) issue_stage(stage);
    cp_async_commit();
  }
  cp_async_wait_dynamic(raw_stages - 2);
  __syncthreads();
  split_b(0);
  cp_async_wait_dynamic(raw_stages - 3);
  wgmma::fence_proxy_async_shared();
  __syncthreads();

  // Raw A of the half about to be split, read one half ahead so that the ld.shared latency
  // hides behind the wgmmas in flight.
  uint2 a_raw[4];
  load_a_raw(a_raw, smem + raw_slot(0), a_row, 0);

#pragma unroll 1
  for (int stage = 0; stage < stage_count; ++stage) {
    const uint32_t base = smem_address + (stage % kDeepBSlots) * kBStageBytes;
    const bool more = stage + 1 < stage_count;
#pragma unroll
    for (int ks = 0; ks < kWgmmaStageK / 32; ++ks) {
      uint32_t a_hi[4], a_lo[4];
      split_a(a_raw, a_hi, a_lo);
      pin_fragment(a_hi);
      pin_fragment(a_lo);
      const uint32_t k_offset = 32 * ks;
      const uint64_t b_hi = wgmma::descriptor(base + kBHi + k_offset);
      wgmma::fence();
      if constexpr (kBIsU8) {
        wgmma::wgmma_rs_m64n128k32_s8u8(acc_hi, a_hi, b_hi);
        wgmma::wgmma_rs_m64n128k32_u8u8(acc_lo, a_lo, b_hi);
      } else {
        const uint64_t b_lo = wgmma::descriptor(base + kBLo + k_offset);
        wgmma::wgmma_rs_m64n128k32_s8s8(acc_hi, a_hi, b_hi);
        wgmma::wgmma_rs_m64n128k32_s8u8(acc_mid, a_hi, b_lo);
        wgmma::wgmma_rs_m64n128k32_u8u8(acc_lo, a_lo, b_lo);
        wgmma::wgmma_rs_m64n128k32_u8s8(acc_mid, a_lo, b_hi);
      }
      wgmma::commit_group();
      if (ks == 0) {
        // Slot (s − 1) % R: stage s − 1 was consumed entirely in iteration s − 1.
        if (stage + raw_stages - 1 < stage_count) issue_stage(stage + raw_stages - 1);
        cp_async_commit();
        // After the split: its permutes need the registers the raw half would occupy.
        if (more) split_b(stage + 1);
        load_a_raw(a_raw, smem + raw_slot(stage), a_row, 1);
        // A flex16 B keeps one half's fragments live at a time (register budget).
        if constexpr (!kBIsU8) wgmma::wait_group<0>();
      } else if (more) {
        // Stage s + 1 landed before the barrier that ended iteration s − 1.
        load_a_raw(a_raw, smem + raw_slot(stage + 1), a_row, 0);
      }
    }
    cp_async_wait_dynamic(raw_stages - 3);
    wgmma::wait_group<0>();
    wgmma::fence_proxy_async_shared();
    __syncthreads();
  }
  cp_async_wait<0>();
  finish_tile<kBIsU8>(p, smem, acc_hi, acc_mid, acc_lo, batch, row0, col0, rows_a, rows_b);
#elif defined(__CUDA_ARCH__)
  __trap();  // the PTX fallback: never launched (prepare_wgmma_rs reports false)
#endif
}

namespace wgmma_rs_detail {

template <bool kBIsU8, bool kBKContig>
bool prepare_one() {
  return prepare_sm90_kernel(gemm_wgmma_rs_deep_kernel<kBIsU8, kBKContig>,
                             deep_smem_bytes(kBIsU8, deep_max_raw_stages(kBIsU8)));
}

template <bool kBIsU8, bool kBKContig>
void launch_one(dim3 grid, const IntegerGemmArgs& args, cudaStream_t stream) {
  gemm_wgmma_rs_deep_kernel<kBIsU8, kBKContig>
      <<<grid, kWgmmaThreads, deep_smem_bytes(kBIsU8, args.raw_stages), stream>>>(args);
  FLEXKIT_CUDA_CHECK_LAUNCH("gemm_wgmma_rs_deep_kernel");
}

}  // namespace wgmma_rs_detail

bool prepare_wgmma_rs(bool b_is_u8, bool b_k_contig) {
  using namespace wgmma_rs_detail;
  if (b_is_u8) return b_k_contig ? prepare_one<true, true>() : prepare_one<true, false>();
  return b_k_contig ? prepare_one<false, true>() : prepare_one<false, false>();
}

void launch_wgmma_rs(bool b_is_u8, bool b_k_contig, dim3 grid, const IntegerGemmArgs& args,
                     cudaStream_t stream) {
  using namespace wgmma_rs_detail;
  if (b_is_u8) {
    if (b_k_contig) {
      launch_one<true, true>(grid, args, stream);
    } else {
      launch_one<true, false>(grid, args, stream);
    }
  } else if (b_k_contig) {
    launch_one<false, true>(grid, args, stream);
  } else {
    launch_one<false, false>(grid, args, stream);
  }
}

int wgmma_rs_max_raw_stages(bool b_is_u8) {
  return b_is_u8 ? wgmma_rs_detail::deep_max_raw_stages(true)
                 : wgmma_rs_detail::deep_max_raw_stages(false);
}

}  // namespace flexkit::backend::cuda::gemm_kernels
