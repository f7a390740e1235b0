#include "backend/cpu/gemm/gemm_pack.hpp"

#include <algorithm>
#include <cstring>

namespace flexkit::backend::cpu::gemm_detail {
namespace {

// Most rows in one A panel (the largest kernel MR).
constexpr int kMaxPackRows = 16;

// The two planes of a flex16 B: b = 256·h + l with h signed (arithmetic shift) and l a byte.
inline std::int16_t plane_high(std::int16_t v) {
  return static_cast<std::int16_t>(v >> 8);
}
inline std::int16_t plane_low(std::int16_t v) {
  return static_cast<std::int16_t>(v & 255);
}

// Writes one k pair of one column into every plane: d points at the column's first plane slot.
template <typename T>
inline void put_pair(std::int16_t* d, int nr, T v0, T v1) {
  if constexpr (sizeof(T) == 1) {
    d[0] = v0;
    d[1] = v1;
  } else {
    d[0] = plane_high(v0);
    d[1] = plane_high(v1);
    d[2 * nr] = plane_low(v0);
    d[2 * nr + 1] = plane_low(v1);
  }
}

template <typename T>
void pack_b_int_impl(StridedBlock<T> b, std::int64_t kv, std::int64_t cols, int nr,
                     std::int16_t* dst) {
  constexpr int planes = sizeof(T) == 1 ? 1 : 2;
  const std::int64_t kp = (kv + 1) / 2, full = kv / 2;
  const std::int64_t panel_size = kp * planes * nr * 2;
  for (std::int64_t j0 = 0; j0 < cols; j0 += nr) {
    std::int16_t* panel = dst + (j0 / nr) * panel_size;
    const int nv = static_cast<int>(std::min<std::int64_t>(nr, cols - j0));
    if (nv < nr || kv != 2 * full) std::memset(panel, 0, sizeof(std::int16_t) * panel_size);
    if (b.rs == 1 && b.cs != 1) {
      // Columns contiguous along k (a transposed B): read each column once.
      for (int j = 0; j < nv; ++j) {
        const T* col = b.base + (j0 + j) * b.cs;
        std::int16_t* d = panel + 2 * j;
        for (std::int64_t p = 0; p < full; ++p)
          put_pair<T>(d + p * planes * nr * 2, nr, col[2 * p], col[2 * p + 1]);
        if (kv != 2 * full) put_pair<T>(d + full * planes * nr * 2, nr, col[kv - 1], T{0});
      }
      continue;
    }
    for (std::int64_t p = 0; p < kp; ++p) {
      const T* row0 = b.base + (2 * p) * b.rs + j0 * b.cs;
      const bool odd = 2 * p + 1 == kv;
      const T* row1 = odd ? row0 : row0 + b.rs;
      std::int16_t* d = panel + p * planes * nr * 2;
      if (b.cs == 1) {
        for (int j = 0; j < nv; ++j) put_pair<T>(d + 2 * j, nr, row0[j], odd ? T{0} : row1[j]);
      } else {
        for (int j = 0; j < nv; ++j)
          put_pair<T>(d + 2 * j, nr, row0[j * b.cs], odd ? T{0} : row1[j * b.cs]);
      }
    }
  }
}

}  // namespace

void pack_a_int(StridedBlock<std::int16_t> a, std::int64_t rows, std::int64_t kv, int mr,
                std::int16_t* dst) {
  const std::int64_t kp = (kv + 1) / 2;
  const std::int64_t panel_size = kp * mr * 2;
  for (std::int64_t r0 = 0; r0 < rows; r0 += mr) {
    std::int16_t* panel = dst + (r0 / mr) * panel_size;
    const int mv = static_cast<int>(std::min<std::int64_t>(mr, rows - r0));
    if (mv < mr || kv != 2 * (kv / 2)) std::memset(panel, 0, sizeof(std::int16_t) * panel_size);
    if (a.cs == 1) {
      // Rows contiguous along k: each k pair is one 4-byte copy, and the pairs of one k pair
      // are written contiguously.
      const std::int16_t* rows_at[kMaxPackRows];
      for (int r = 0; r < mv; ++r) rows_at[r] = a.base + (r0 + r) * a.rs;
      const std::int64_t full = kv / 2;
      for (std::int64_t p = 0; p < full; ++p) {
        std::int16_t* d = panel + p * mr * 2;
        for (int r = 0; r < mv; ++r) std::memcpy(d + 2 * r, rows_at[r] + 2 * p, 4);
      }
      if (kv != 2 * full)
        for (int r = 0; r < mv; ++r) panel[(full * mr + r) * 2] = rows_at[r][kv - 1];
    } else {
      // Otherwise walk k outermost so that a column-major A is read contiguously.
      for (std::int64_t k = 0; k < kv; ++k) {
        const std::int16_t* col = a.base + k * a.cs + r0 * a.rs;
        std::int16_t* d = panel + (k >> 1) * mr * 2 + (k & 1);
        for (int r = 0; r < mv; ++r) d[2 * r] = col[r * a.rs];
      }
    }
  }
}

void pack_b_int(StridedBlock<std::int16_t> b, std::int64_t kv, std::int64_t cols, int nr,
                std::int16_t* dst) {
  pack_b_int_impl(b, kv, cols, nr, dst);
}
void pack_b_int(StridedBlock<std::uint8_t> b, std::int64_t kv, std::int64_t cols, int nr,
                std::int16_t* dst) {
  pack_b_int_impl(b, kv, cols, nr, dst);
}

void pack_a_f32(StridedBlock<float> a, std::int64_t rows, std::int64_t kv, int mr, float* dst) {
  const std::int64_t panel_size = kv * mr;
  for (std::int64_t r0 = 0; r0 < rows; r0 += mr) {
    float* panel = dst + (r0 / mr) * panel_size;
    const int mv = static_cast<int>(std::min<std::int64_t>(mr, rows - r0));
    if (mv < mr) std::memset(panel, 0, sizeof(float) * panel_size);
    if (a.cs == 1) {
      for (int r = 0; r < mv; ++r) {
        const float* row = a.base + (r0 + r) * a.rs;
        for (std::int64_t k = 0; k < kv; ++k) panel[k * mr + r] = row[k];
      }
    } else {
      for (std::int64_t k = 0; k < kv; ++k) {
        const float* col = a.base + k * a.cs + r0 * a.rs;
        for (int r = 0; r < mv; ++r) panel[k * mr + r] = col[r * a.rs];
      }
    }
  }
}

void pack_b_f32(StridedBlock<float> b, std::int64_t kv, std::int64_t cols, int nr, float* dst) {
  const std::int64_t panel_size = kv * nr;
  for (std::int64_t j0 = 0; j0 < cols; j0 += nr) {
    float* panel = dst + (j0 / nr) * panel_size;
    const int nv = static_cast<int>(std::min<std::int64_t>(nr, cols - j0));
    if (nv < nr) std::memset(panel, 0, sizeof(float) * panel_size);
    if (b.rs == 1 && b.cs != 1) {
      for (int j = 0; j < nv; ++j) {
        const float* col = b.base + (j0 + j) * b.cs;
        for (std::int64_t k = 0; k < kv; ++k) panel[k * nr + j] = col[k];
      }
      continue;
    }
    for (std::int64_t k = 0; k < kv; ++k) {
      const float* row = b.base + k * b.rs + j0 * b.cs;
      float* d = panel + k * nr;
      if (b.cs == 1) {
        std::memcpy(d, row, sizeof(float) * nv);
      } else {
        for (int j = 0; j < nv; ++j) d[j] = row[j * b.cs];
      }
    }
  }
}

}  // namespace flexkit::backend::cpu::gemm_detail
