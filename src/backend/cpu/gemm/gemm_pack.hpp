// Packing for the CPU GEMM: copies a block of A or B, from any element strides (transposed,
// sliced with steps, negative, zero), into the contiguous zero-padded panels the microkernels
// read (layouts in gemm_kernels.hpp). This is the only place that sees the user's strides.
#pragma once
#include <cstdint>

namespace flexkit::backend::cpu::gemm_detail {

// A strided matrix view: element (r, c) is at base[r·rs + c·cs]; base points at element (0, 0)
// of the block being packed, which always exists.
template <typename T>
struct StridedBlock {
  const T* base;
  std::int64_t rs;
  std::int64_t cs;
};

// `rows` rows × `kv` k values of an int16 A into ceil(rows/mr) panels of ceil(kv/2)·mr pairs.
void pack_a_int(StridedBlock<std::int16_t> a, std::int64_t rows, std::int64_t kv, int mr,
                std::int16_t* dst);
// `kv` k values × `cols` columns of B into ceil(cols/nr) panels; `planes` 2 splits each int16
// into h = b >> 8 and l = b & 255, a u8 B has one plane.
void pack_b_int(StridedBlock<std::int16_t> b, std::int64_t kv, std::int64_t cols, int nr,
                std::int16_t* dst);
void pack_b_int(StridedBlock<std::uint8_t> b, std::int64_t kv, std::int64_t cols, int nr,
                std::int16_t* dst);

void pack_a_f32(StridedBlock<float> a, std::int64_t rows, std::int64_t kv, int mr, float* dst);
void pack_b_f32(StridedBlock<float> b, std::int64_t kv, std::int64_t cols, int nr, float* dst);

}  // namespace flexkit::backend::cpu::gemm_detail
