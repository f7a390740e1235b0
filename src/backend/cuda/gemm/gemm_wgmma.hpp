// Host side of the sm_90a exact integer GEMM kernel (int8 tensor cores through wgmma, each int16
// split in-kernel into a signed high and an unsigned low byte). The kernel itself is in
// gemm_wgmma.cuh; its instantiations are spread over gemm_wgmma_s16.cu and gemm_wgmma_u8.cu.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/gemm/gemm_kernel_args.cuh"

namespace flexkit::backend::cuda::gemm_kernels {

// One CTA computes a 128 × 128 output tile with two warpgroups (64 × 128 each); K advances in
// stages of 64 through a 3-deep shared-memory ring of byte planes, fed by a ring of raw int16 /
// u8 tiles filled with cp.async.
inline constexpr int kWgmmaTileM = 128;
inline constexpr int kWgmmaTileN = 128;
inline constexpr int kWgmmaStageK = 64;
inline constexpr int kWgmmaThreads = 256;
// The int32 accumulators stay exact for at most 32768 products of bytes
// (32768 · 255² and 32768 · 2 · 128 · 255 are both < 2^31): a CTA's K range is never longer.
inline constexpr int64_t kWgmmaMaxChunkK = 32768;

// Which kernel: B's element type and, per operand, whether its unit stride runs along K
// (k-contiguous) or along its rows (M for A, N for B).
struct WgmmaVariant {
  bool b_is_u8;
  bool a_k_contig;
  bool b_k_contig;
  int tile_n;  // kWgmmaTileN, or kWgmmaWideTileN (u8 B only)
};
// The wider N tile a u8 B uses (the fastest u8 variant measured).
inline constexpr int kWgmmaWideTileN = 192;

// The deepest raw ring (args.raw_stages) that fits the kernel's shared memory.
int wgmma_max_raw_stages(bool b_is_u8, int tile_n);

// On the current device: raises the variant's dynamic shared-memory limit and reports whether the
// loaded kernel image is real sm_90a code (false when only the PTX fallback exists, whose body is
// empty). Call once per device and variant before launching.
bool prepare_wgmma(const WgmmaVariant& variant);

// Queues grid = (tiles_m · tiles_n, splits, batch entries) CTAs of kWgmmaThreads threads.
void launch_wgmma(const WgmmaVariant& variant, dim3 grid, const IntegerGemmArgs& args,
                  cudaStream_t stream);

// Per element type of B (one translation unit each, to spread the build).
bool prepare_wgmma_s16(bool a_k_contig, bool b_k_contig);
bool prepare_wgmma_u8(bool a_k_contig, bool b_k_contig, bool wide);
void launch_wgmma_s16(bool a_k_contig, bool b_k_contig, dim3 grid, const IntegerGemmArgs& args,
                      cudaStream_t stream);
void launch_wgmma_u8(bool a_k_contig, bool b_k_contig, bool wide, dim3 grid,
                     const IntegerGemmArgs& args, cudaStream_t stream);

// Whether `device` runs sm_90a code (compute capability 9.0; asked once per device).
bool device_is_sm90(int device);

// How a wgmma launch of `ctas` output tiles divides K (every split a multiple of kWgmmaStageK,
// none longer than kWgmmaMaxChunkK, and enough splits to fill whole waves on `sms`
// multiprocessors when the tiles alone do not).
struct WgmmaKSplit {
  int64_t splits;
  int64_t k_chunk;
};
WgmmaKSplit wgmma_k_split(int64_t k, int64_t ctas, int sms);

// Finishes the int64 split-K workspace of `args` (args.splits > 1): the first `outputs`
// accumulators ([batch][m][n]) through the epilogue into args.c, statistics into args.stats.
// Before it waits for the kernel that adds into the workspace, it sets clear_words (even) words
// at `clear` to zeros (an alternating_workspace's stale half).
void launch_finish_splits(const IntegerGemmArgs& args, int64_t outputs, int device,
                          cudaStream_t stream, unsigned long long* clear = nullptr,
                          std::size_t clear_words = 0);

}  // namespace flexkit::backend::cuda::gemm_kernels
