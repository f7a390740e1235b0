// The driver's cuTensorMapEncodeTiled, looked up once through the runtime (flexkit links only
// the runtime library): what every kernel that loads or stores through TMA encodes its maps with.
#pragma once
#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <string>

#include "flexkit/error.hpp"

namespace flexkit::backend::cuda::gemm_kernels {

// Throws CudaError where the driver has no such entry point (older than CUDA 12).
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder();

// A rows × columns int16 matrix with unit column stride as a 2-D map of 16-bit words (columns
// innermost), boxes of box_columns × box_rows, 128-byte swizzle, no L2 sector promotion; `what`
// names the matrix in the error. A one-row matrix's row stride is never stepped, but the map
// still wants a multiple of 16 bytes. The caller checks that the base and a stepped row stride
// are multiples of 16 bytes.
inline CUtensorMap encode_int16_rows(const void* data, int64_t rows, int64_t columns,
                                     int64_t row_stride, int box_columns, int box_rows,
                                     const char* what) {
  CUtensorMap map;
  const int64_t row_bytes = rows > 1 ? row_stride * 2 : (columns * 2 + 15) / 16 * 16;
  const cuuint64_t dims[2] = {cuuint64_t(columns), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(row_bytes)};
  const cuuint32_t box[2] = {cuuint32_t(box_columns), cuuint32_t(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult result = tensor_map_encoder()(
      &map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, const_cast<void*>(data), dims, strides, box,
      element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS)
    throw CudaError("cuTensorMapEncodeTiled failed (" + std::to_string(int(result)) + ") for a " +
                    std::to_string(rows) + " x " + std::to_string(columns) + " int16 " + what);
  return map;
}

}  // namespace flexkit::backend::cuda::gemm_kernels
