// The planar GEMM's host side: splitting operands into byte planes (two small memory-bound
// kernels), the TMA tensor maps over the planes, and the launch of gemm_wgmma_planar_kernel.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <string>

#include "backend/cuda/check.hpp"
#include "backend/cuda/gemm/gemm_planar.cuh"
#include "backend/cuda/gemm/gemm_planar.hpp"
#include "backend/cuda/gemm/tensor_map_encoder.hpp"
#include "flexkit/error.hpp"

namespace flexkit::backend::cuda::gemm_kernels {
namespace {

constexpr int kSplitThreads = 256;
constexpr int kTileRows = 64;  // the transposing split's tile: 64 rows × 64 k
constexpr int kTileK = 64;
constexpr int64_t kMaxGridY = 65535;

__host__ __device__ int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
int64_t plane_pitch(int64_t k) {
  return ceil_div(k, 16) * 16;
}

// k-contiguous int16 with 16-byte aligned rows: 8 mantissas per thread, one 16-byte load, an
// 8-byte store into each plane. Byte 1 of a two's-complement int16 is its signed high byte
// (m >> 8), byte 0 its unsigned low byte (m & 0xff).
__global__ void __launch_bounds__(kSplitThreads)
    split_kcontig_s16_kernel(const int16_t* data, int64_t row_stride, int64_t batch_stride,
                             int64_t rows, int64_t k, int64_t pitch, int64_t plane_stride,
                             int64_t out_batch_stride, unsigned char* out) {
  const int64_t chunks = ceil_div(k, 8);
  const int64_t entry = blockIdx.y;
  const int16_t* const in = data + entry * batch_stride;
  unsigned char* const hi_plane = out + entry * out_batch_stride;
  unsigned char* const lo_plane = hi_plane + plane_stride;
  for (int64_t i = int64_t(blockIdx.x) * kSplitThreads + threadIdx.x; i < rows * chunks;
       i += int64_t(gridDim.x) * kSplitThreads) {
    const int64_t row = i / chunks;
    const int64_t k0 = (i - row * chunks) * 8;
    const int16_t* const src = in + row * row_stride + k0;
    unsigned char* const hi = hi_plane + row * pitch + k0;
    unsigned char* const lo = lo_plane + row * pitch + k0;
    if (k0 + 8 <= k) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(src));
      *reinterpret_cast<uint2*>(hi) =
          make_uint2(__byte_perm(v.x, v.y, 0x7531), __byte_perm(v.z, v.w, 0x7531));
      *reinterpret_cast<uint2*>(lo) =
          make_uint2(__byte_perm(v.x, v.y, 0x6420), __byte_perm(v.z, v.w, 0x6420));
    } else {
      for (int64_t j = 0; k0 + j < k; ++j) {
        const uint16_t m = static_cast<uint16_t>(src[j]);
        hi[j] = static_cast<unsigned char>(m >> 8);
        lo[j] = static_cast<unsigned char>(m);
      }
    }
  }
}

// Any strides (the transposing case: rows contiguous): a 64 × 64 tile through shared memory,
// read with consecutive threads along the operand's smaller stride, written four k-bytes per
// store. Bytes past k up to the next multiple of 4 are written as zeros (inside the pitch).
__global__ void __launch_bounds__(kSplitThreads)
    split_tiled_kernel(OperandView v, int is_u8, int rows_fastest, int64_t rows, int64_t k,
                       int64_t tiles_k, int64_t pitch, int64_t plane_stride,
                       int64_t out_batch_stride, unsigned char* out) {
  __shared__ uint16_t tile[kTileRows][kTileK + 2];
  const int64_t entry = blockIdx.y;
  const int64_t row0 = int64_t(blockIdx.x / tiles_k) * kTileRows;
  const int64_t k0 = int64_t(blockIdx.x % tiles_k) * kTileK;
  for (int e = threadIdx.x; e < kTileRows * kTileK; e += kSplitThreads) {
    const int r = rows_fastest ? e % kTileRows : e / kTileK;
    const int c = rows_fastest ? e / kTileRows : e % kTileK;
    uint16_t value = 0;
    if (row0 + r < rows && k0 + c < k) {
      const int64_t offset =
          entry * v.batch_stride + (row0 + r) * v.row_stride + (k0 + c) * v.k_stride;
      value = is_u8 ? static_cast<const uint8_t*>(v.data)[offset]
                    : static_cast<uint16_t>(static_cast<const int16_t*>(v.data)[offset]);
    }
    tile[r][c] = value;
  }
  __syncthreads();
  unsigned char* const plane0 = out + entry * out_batch_stride;
  for (int e = threadIdx.x; e < kTileRows * (kTileK / 4); e += kSplitThreads) {
    const int r = e / (kTileK / 4);
    const int c = 4 * (e % (kTileK / 4));
    if (row0 + r >= rows || k0 + c >= k) continue;
    const uint32_t w01 = uint32_t(tile[r][c]) | (uint32_t(tile[r][c + 1]) << 16);
    const uint32_t w23 = uint32_t(tile[r][c + 2]) | (uint32_t(tile[r][c + 3]) << 16);
    unsigned char* const at = plane0 + (row0 + r) * pitch + k0 + c;
    if (is_u8) {
      *reinterpret_cast<uint32_t*>(at) = __byte_perm(w01, w23, 0x6420);
    } else {
      *reinterpret_cast<uint32_t*>(at) = __byte_perm(w01, w23, 0x7531);
      *reinterpret_cast<uint32_t*>(at + plane_stride) = __byte_perm(w01, w23, 0x6420);
    }
  }
}

// Rows contiguous (an n-contiguous B, an m-contiguous A) with 16-byte aligned k-rows: the
// transposing split of a 128-row × 64-k tile, 16-byte loads along the rows into shared memory,
// then each thread writes 32 k-bytes of one row per plane (one whole sector each).
template <typename Element>
__global__ void __launch_bounds__(kSplitThreads)
    split_rowcontig_kernel(const Element* data, int64_t k_stride, int64_t batch_stride,
                           int64_t rows, int64_t k, int64_t tiles_k, int64_t pitch,
                           int64_t plane_stride, int64_t out_batch_stride, unsigned char* out) {
  constexpr int kRows = 128;
  constexpr int kPerVector = 16 / int(sizeof(Element));
  constexpr int kVectors = kRows / kPerVector;  // per k-row of the tile
  __shared__ alignas(16) Element tile[kTileK][kRows + kPerVector];
  const int64_t entry = blockIdx.y;
  const int64_t row0 = int64_t(blockIdx.x / tiles_k) * kRows;
  const int64_t k0 = int64_t(blockIdx.x % tiles_k) * kTileK;
  const Element* const in = data + entry * batch_stride;
  for (int e = threadIdx.x; e < kTileK * kVectors; e += kSplitThreads) {
    const int kk = e / kVectors;
    const int r = (e % kVectors) * kPerVector;
    Element* const dst = &tile[kk][r];
    const Element* const src = in + (k0 + kk) * k_stride + row0 + r;
    if (k0 + kk < k && row0 + r + kPerVector <= rows) {
      *reinterpret_cast<uint4*>(dst) = __ldg(reinterpret_cast<const uint4*>(src));
    } else {
      for (int j = 0; j < kPerVector; ++j)
        dst[j] = k0 + kk < k && row0 + r + j < rows ? src[j] : Element(0);
    }
  }
  __syncthreads();
  const int r = threadIdx.x % kRows;
  const int half = threadIdx.x / kRows;  // k-bytes [32·half, 32·half + 32) of the tile
  if (row0 + r >= rows || k0 + 32 * half >= k) return;
  unsigned char* const at = out + entry * out_batch_stride + (row0 + r) * pitch + k0 + 32 * half;
  uint32_t hi[8], lo[8];
#pragma unroll
  for (int w = 0; w < 8; ++w) {
    uint32_t h = 0, l = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t v = static_cast<uint16_t>(tile[32 * half + 4 * w + j][r]);
      h |= ((v >> 8) & 0xffu) << (8 * j);
      l |= (v & 0xffu) << (8 * j);
    }
    hi[w] = h;
    lo[w] = l;
  }
  // Bytes past k (up to the 32-byte run's end, inside the pitch when the run starts before k)
  // come from the zero-filled tile. A run that would cross the pitch's end is written to it only.
  const int64_t run = pitch - (k0 + 32 * half) < 32 ? pitch - (k0 + 32 * half) : 32;
  if (sizeof(Element) == 1) {
    // u8: the value is the low byte; one plane.
    if (run == 32) {
      reinterpret_cast<uint4*>(at)[0] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
      reinterpret_cast<uint4*>(at)[1] = make_uint4(lo[4], lo[5], lo[6], lo[7]);
    } else {
      reinterpret_cast<uint4*>(at)[0] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
    }
    return;
  }
  unsigned char* const at_lo = at + plane_stride;
  reinterpret_cast<uint4*>(at)[0] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
  reinterpret_cast<uint4*>(at_lo)[0] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
  if (run == 32) {
    reinterpret_cast<uint4*>(at)[1] = make_uint4(hi[4], hi[5], hi[6], hi[7]);
    reinterpret_cast<uint4*>(at_lo)[1] = make_uint4(lo[4], lo[5], lo[6], lo[7]);
  }
}

// Dims (k, rows, plane, entry) with the planes' byte strides; boxes of 64 k-bytes × box_rows in
// the 64-byte swizzle the wgmma descriptors describe.
CUtensorMap encode(const PlanarOperand& o, int box_rows) {
  CUtensorMap map;
  const cuuint64_t dims[4] = {cuuint64_t(o.k), cuuint64_t(o.rows), cuuint64_t(o.planes),
                              cuuint64_t(o.entries)};
  const cuuint64_t strides[3] = {cuuint64_t(o.pitch), cuuint64_t(o.plane_stride),
                                 cuuint64_t(o.batch_stride)};
  const cuuint32_t box[4] = {cuuint32_t(kWgmmaStageK), cuuint32_t(box_rows), 1, 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  const CUresult result = tensor_map_encoder()(
      &map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 4, const_cast<void*>(o.data), dims, strides, box,
      element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_64B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS)
    throw CudaError("cuTensorMapEncodeTiled failed (" + std::to_string(int(result)) + ") for a " +
                    std::to_string(o.rows) + " x " + std::to_string(o.k) + " operand of " +
                    std::to_string(o.planes) + " plane(s)");
  return map;
}

}  // namespace

PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static std::once_flag once;
  static PFN_cuTensorMapEncodeTiled_v12000 function = nullptr;
  std::call_once(once, [] {
    void* address = nullptr;
    cudaDriverEntryPointQueryResult status{};
    FLEXKIT_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &address, 12000,
                                                        cudaEnableDefault, &status));
    if (status == cudaDriverEntryPointSuccess)
      function = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(address);
  });
  if (function == nullptr)
    throw CudaError("the driver has no cuTensorMapEncodeTiled (needs CUDA 12 or newer)");
  return function;
}

std::size_t planar_bytes(int64_t rows, int64_t k, int64_t entries, int planes) {
  return static_cast<std::size_t>(entries * planes * rows * plane_pitch(k));
}

PlanarOperand split_into_planes(const OperandView& v, bool is_u8, int64_t rows, int64_t k,
                                int64_t batch, void* scratch, cudaStream_t stream) {
  PlanarOperand o;
  o.data = scratch;
  o.rows = rows;
  o.k = k;
  o.entries = v.batch_stride == 0 ? 1 : batch;
  o.planes = is_u8 ? 1 : 2;
  o.pitch = plane_pitch(k);
  o.plane_stride = rows * o.pitch;
  o.batch_stride = o.planes * o.plane_stride;
  unsigned char* const out = static_cast<unsigned char*>(scratch);
  const bool vector = !is_u8 && (v.k_stride == 1 || k == 1) && v.row_stride % 8 == 0 &&
                      v.batch_stride % 8 == 0 && reinterpret_cast<std::uintptr_t>(v.data) % 16 == 0;
  for (int64_t e0 = 0; e0 < o.entries; e0 += kMaxGridY) {
    const unsigned entries = static_cast<unsigned>(std::min(kMaxGridY, o.entries - e0));
    OperandView part = v;
    part.data = static_cast<const unsigned char*>(v.data) + e0 * v.batch_stride * (is_u8 ? 1 : 2);
    unsigned char* const part_out = out + e0 * o.batch_stride;
    const int64_t per_vector = is_u8 ? 16 : 8;
    const bool rows_vector = rows > 1 && v.row_stride == 1 && v.k_stride % per_vector == 0 &&
                             v.batch_stride % per_vector == 0 &&
                             reinterpret_cast<std::uintptr_t>(v.data) % 16 == 0;
    if (rows_vector) {
      const int64_t tiles_k = ceil_div(k, kTileK);
      const int64_t tiles = ceil_div(rows, 128) * tiles_k;
      if (tiles > INT32_MAX)
        throw ValueError("gemm: an operand of " + std::to_string(rows) + " x " + std::to_string(k) +
                         " is too large to split into planes");
      const dim3 grid(static_cast<unsigned>(tiles), entries);
      if (is_u8) {
        split_rowcontig_kernel<uint8_t><<<grid, kSplitThreads, 0, stream>>>(
            static_cast<const uint8_t*>(part.data), v.k_stride, v.batch_stride, rows, k, tiles_k,
            o.pitch, o.plane_stride, o.batch_stride, part_out);
      } else {
        split_rowcontig_kernel<int16_t><<<grid, kSplitThreads, 0, stream>>>(
            static_cast<const int16_t*>(part.data), v.k_stride, v.batch_stride, rows, k, tiles_k,
            o.pitch, o.plane_stride, o.batch_stride, part_out);
      }
      FLEXKIT_CUDA_CHECK_LAUNCH("split_rowcontig_kernel");
    } else if (vector) {
      const int64_t threads = rows * ceil_div(k, 8);
      const unsigned blocks =
          static_cast<unsigned>(std::min<int64_t>(ceil_div(threads, kSplitThreads), 4096));
      split_kcontig_s16_kernel<<<dim3(blocks, entries), kSplitThreads, 0, stream>>>(
          static_cast<const int16_t*>(part.data), v.row_stride, v.batch_stride, rows, k, o.pitch,
          o.plane_stride, o.batch_stride, part_out);
      FLEXKIT_CUDA_CHECK_LAUNCH("split_kcontig_s16_kernel");
    } else {
      const auto abs64 = [](int64_t x) { return x < 0 ? -x : x; };
      const int rows_fastest = k > 1 && abs64(v.row_stride) < abs64(v.k_stride) ? 1 : 0;
      const int64_t tiles_k = ceil_div(k, kTileK);
      const int64_t tiles = ceil_div(rows, kTileRows) * tiles_k;
      if (tiles > INT32_MAX)
        throw ValueError("gemm: an operand of " + std::to_string(rows) + " x " + std::to_string(k) +
                         " is too large to split into planes");
      split_tiled_kernel<<<dim3(static_cast<unsigned>(tiles), entries), kSplitThreads, 0, stream>>>(
          part, is_u8 ? 1 : 0, rows_fastest, rows, k, tiles_k, o.pitch, o.plane_stride,
          o.batch_stride, part_out);
      FLEXKIT_CUDA_CHECK_LAUNCH("split_tiled_kernel");
    }
  }
  return o;
}

bool planar_in_place(const OperandView& v, int64_t rows, int64_t k, int64_t batch,
                     PlanarOperand& out) {
  const int64_t pitch = rows == 1 ? plane_pitch(k) : v.row_stride;
  if (!(v.k_stride == 1 || k == 1) || pitch < k || pitch % 16 != 0 ||
      reinterpret_cast<std::uintptr_t>(v.data) % 16 != 0 || v.batch_stride % 16 != 0 ||
      v.batch_stride < 0)
    return false;
  out.data = v.data;
  out.rows = rows;
  out.k = k;
  out.entries = v.batch_stride == 0 ? 1 : batch;
  out.planes = 1;
  out.pitch = pitch;
  out.plane_stride = rows * pitch;  // one plane: never stepped
  out.batch_stride = out.entries == 1 ? out.plane_stride : v.batch_stride;
  return true;
}

int planar_ring_stages(bool b_is_u8, int tile_n) {
  return planar_detail::ring_stages(b_is_u8, tile_n);
}

bool prepare_planar(bool b_is_u8, int tile_n) {
  return b_is_u8 ? prepare_planar_u8(tile_n) : prepare_planar_s16();
}

void launch_planar(bool b_is_u8, int tile_n, dim3 grid, const IntegerGemmArgs& args,
                   const PlanarOperand& a, const PlanarOperand& b, cudaStream_t stream) {
  PlanarMaps maps;
  maps.a = encode(a, kWgmmaTileM);
  maps.b = encode(b, tile_n);
  if (b_is_u8) {
    launch_planar_u8(tile_n, grid, args, maps, stream);
  } else {
    launch_planar_s16(grid, args, maps, stream);
  }
}

}  // namespace flexkit::backend::cuda::gemm_kernels
