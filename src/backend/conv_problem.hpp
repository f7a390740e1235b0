// One convolution as the backends see it, after ConvPlan's calls have checked and normalised their
// arguments: the geometry with 3 spatial dims, the operands with strides in elements, and the
// output as a matrix.
#pragma once
#include <compare>
#include <cstdint>
#include <string>

#include "backend/gemm_problem.hpp"

namespace flexkit::conv {

// One geometry with 3 spatial dims (missing leading dims have size 1).
struct Geometry {
  std::int64_t C = 1, K = 1, N = 1;
  std::int64_t in[3] = {1, 1, 1};   // D, H, W
  std::int64_t flt[3] = {1, 1, 1};  // T, R, S
  std::int64_t out[3] = {1, 1, 1};  // M, P, Q
  std::int64_t pad[3] = {0, 0, 0};
  std::int64_t str[3] = {1, 1, 1};
  std::int64_t dil[3] = {1, 1, 1};
  std::int64_t up[3] = {1, 1, 1};

  std::int64_t in_positions() const { return in[0] * in[1] * in[2]; }
  std::int64_t out_positions() const { return out[0] * out[1] * out[2]; }
  std::int64_t taps() const { return flt[0] * flt[1] * flt[2]; }
  std::int64_t upscale_phases() const { return up[0] * up[1] * up[2]; }
  auto operator<=>(const Geometry&) const = default;  // plan keys

  // "C 64 K 64 N 16 in 1x56x56 filter 1x3x3 pad 0,1,1 stride 1,1,1 dilation … upscale …".
  std::string describe() const {
    auto dims = [](const std::int64_t v[3], const char* sep) {
      return std::to_string(v[0]) + sep + std::to_string(v[1]) + sep + std::to_string(v[2]);
    };
    return "C " + std::to_string(C) + " K " + std::to_string(K) + " N " + std::to_string(N) +
           " in " + dims(in, "x") + " filter " + dims(flt, "x") + " pad " + dims(pad, ",") +
           " stride " + dims(str, ",") + " dilation " + dims(dil, ",") + " upscale " +
           dims(up, ",");
  }
};

// A 5-d operand (outer, d0, d1, d2, inner), e.g. I = (C, D, H, W, N): element (a, x, y, z, b)
// lives at data + a·stride[0] + x·stride[1] + y·stride[2] + z·stride[3] + b·stride[4].
struct Operand {
  const void* data = nullptr;
  gemm::ElementKind kind = gemm::ElementKind::f32;
  std::int64_t stride[5] = {0, 0, 0, 0, 0};
};

struct ConvProblem {
  Geometry g;
  // fprop: x = I, y = F; bprop: x = F, y = E; update: x = I, y = E. For update, E's
  // (m, p, q, n) axes must collapse into one stride (stride[4] then steps one column).
  Operand x, y;
  // The output as a matrix: fprop O as K × (M·P·Q·N), bprop gradI as C × (D·H·W·N), update
  // gradF as (C·T·R·S) × K; the caller collapses the axes (or stages a contiguous copy).
  gemm::OutputRef out;
  portable::GemmEpilogue epilogue{};  // integer products
  gemm::EpilogueMode mode = gemm::EpilogueMode::store;
  float alpha = 1.0f, beta = 0.0f;  // f32 products
};

}  // namespace flexkit::conv
