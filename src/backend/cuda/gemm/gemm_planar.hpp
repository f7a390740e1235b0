// Host side of the planar exact GEMM (sm_90a): the operands are split once per call into byte
// planes in global memory (split_into_planes), then gemm_wgmma_planar_kernel (gemm_planar.cuh)
// streams the planes through TMA into wgmma. Same tiles, K chunks and epilogue as the lean
// kernel (gemm_wgmma.hpp); any operand layout (the split reads any strides).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/gemm/gemm_kernel_args.cuh"

namespace flexkit::backend::cuda::gemm_kernels {

// One operand as the planar kernel reads it: `planes` byte matrices (2: the signed high and the
// unsigned low bytes of int16 mantissas; 1: u8 values) of rows × k bytes, k contiguous.
// Byte (entry, plane, row, k) at data + entry·batch_stride + plane·plane_stride + row·pitch + k;
// pitch, plane_stride and batch_stride are multiples of 16. entries is 1 for an operand shared by
// every batch entry (batch stride 0), else the batch.
struct PlanarOperand {
  const void* data = nullptr;
  int64_t rows = 0, k = 0, entries = 0;
  int64_t pitch = 0, plane_stride = 0, batch_stride = 0;
  int planes = 0;
};

// The scratch bytes split_into_planes needs for an operand of `rows` × k over `entries`.
std::size_t planar_bytes(int64_t rows, int64_t k, int64_t entries, int planes);

// Splits an int16 operand (any strides; batch stride 0 = one shared entry) into its two planes,
// or copies a u8 operand into one k-contiguous plane, at `scratch` (planar_bytes long).
PlanarOperand split_into_planes(const OperandView& v, bool is_u8, int64_t rows, int64_t k,
                                int64_t batch, void* scratch, cudaStream_t stream);

// A u8 operand the kernel can read where it is (k-contiguous, 16-byte aligned base, rows and
// batch stride): fills `out` and returns true; false when it has to go through a plane copy.
bool planar_in_place(const OperandView& v, int64_t rows, int64_t k, int64_t batch,
                     PlanarOperand& out);

// The ring depth of the kernel (what fits in shared memory), and whether the device runs it
// (raises its shared-memory limit; call once per device and variant).
int planar_ring_stages(bool b_is_u8, int tile_n);
bool prepare_planar(bool b_is_u8, int tile_n);

// Queues grid = (tiles_m · tiles_n, splits, batch entries) CTAs; args.raw_stages is the ring
// depth, args.a / args.b only lend their batch strides (0 = one shared entry).
void launch_planar(bool b_is_u8, int tile_n, dim3 grid, const IntegerGemmArgs& args,
                   const PlanarOperand& a, const PlanarOperand& b, cudaStream_t stream);

// Per element type of B (one translation unit each, to spread the build).
struct PlanarMaps;
bool prepare_planar_s16();
bool prepare_planar_u8(int tile_n);
void launch_planar_s16(dim3 grid, const IntegerGemmArgs& args, const PlanarMaps& maps,
                       cudaStream_t stream);
void launch_planar_u8(int tile_n, dim3 grid, const IntegerGemmArgs& args, const PlanarMaps& maps,
                      cudaStream_t stream);

}  // namespace flexkit::backend::cuda::gemm_kernels
