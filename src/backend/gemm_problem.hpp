// One GEMM as the backends see it, after the public dot() has checked and normalised its
// arguments: C[b] = op(A[b]) · op(B[b]) (+ beta · C[b]) with every operand given by a base
// pointer and element strides, so transposes and sliced views need no copy.
//
// Guarantees the dispatcher gives every backend kernel:
// - m, n, k, batch ≥ 1; every pointer is valid for the elements the strides reach;
// - the output does not overlap A or B, and no two output elements share an address;
// - integer products: A is flex16 and B is flex16 or u8 (u8 × flex16 arrives transposed);
//   float products: A, B and C are f32;
// - strides are in elements and may be any value (negative, zero for broadcast along batch,
//   both non-unit); fast paths need one unit stride per operand but must not be required.
#pragma once
#include <cstdint>

#include "flexkit/portable/gemm_epilogue.hpp"

namespace flexkit::gemm {

enum class ElementKind : std::uint8_t { f32, flex16, u8 };

// "f32", "flex16", "u8": for plan descriptions.
inline const char* element_kind_name(ElementKind kind) {
  return kind == ElementKind::f32 ? "f32" : kind == ElementKind::flex16 ? "flex16" : "u8";
}

// A logical rows × cols matrix (per batch entry): element (r, c) of batch entry b lives at
// data + b·batch_stride + r·row_stride + c·col_stride (elements of `kind`).
struct MatrixRef {
  const void* data = nullptr;
  ElementKind kind = ElementKind::f32;
  std::int64_t row_stride = 0;
  std::int64_t col_stride = 0;
  std::int64_t batch_stride = 0;
};

struct OutputRef {
  void* data = nullptr;
  ElementKind kind = ElementKind::f32;  // f32 or flex16
  std::int64_t row_stride = 0;
  std::int64_t col_stride = 0;
  std::int64_t batch_stride = 0;
};

// store: write every output element and record statistics (flex16). measure: write nothing,
// only record the accumulator / value range (the `exact` iwl policy's first pass). sums (the CPU
// driver only, integer products): write each exact accumulator unrounded as an int64 at the
// output's strides (c.kind is not read): the parts of a sum split over processes, added as
// integers before the one rounding (gemm/exact_sums.hpp).
enum class EpilogueMode : std::uint8_t { store, measure, sums };

struct GemmProblem {
  std::int64_t batch = 1;
  std::int64_t m = 0, n = 0, k = 0;
  MatrixRef a;  // m × k
  MatrixRef b;  // k × n
  OutputRef c;  // m × n
  // Integer products (A flex16): how accumulators become outputs.
  portable::GemmEpilogue epilogue{};
  EpilogueMode mode = EpilogueMode::store;
  // f32 products: C = alpha · A·B + beta · C (beta == 0: C is not read).
  float alpha = 1.0f;
  float beta = 0.0f;
};

}  // namespace flexkit::gemm
