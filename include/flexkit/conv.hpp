// Convolution with 1, 2 or 3 spatial dims: fprop (forward), bprop (gradient with respect to the
// input) and update (gradient with respect to the filter).
//
// Layouts (the seed's, batch innermost): input I = (C, D, H, W, N), filter F = (C, T, R, S, K),
// output O = (K, M, P, Q, N). With fewer spatial dims the leading ones are left out: 2-d is
// I = (C, H, W, N), F = (C, R, S, K); 1-d is I = (C, W, N), F = (C, S, K).
//
//   O[k, m, p, q, n] = Σ_{c,t,r,s} Iup[c, m·str−pad+t·dil, p·…, q·…, n] · F[c, t, r, s, k]
//
// where Iup is the input upsampled by nearest-neighbour replication (`upscale`) and zero outside.
// Output size per dim: M = floor((D·up + 2·pad − dil·(T−1) − 1) / stride) + 1.
//
// Types: f32 × f32 → f32; flex16 × flex16 → flex16 or f32; and for fprop / update a u8 input
// (spikes) with a flex16 filter / gradient → flex16 or f32. Integer convolutions are exact: every
// output is the exact sum of its mantissa products, rounded once (docs/flex16.md), so results are
// bit-identical whatever the blocking or thread count.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "flexkit/array.hpp"
#include "flexkit/expr.hpp"
#include "flexkit/heavy_op_options.hpp"
#include "flexkit/shape.hpp"

namespace flexkit {

// Geometry per spatial dim, outermost first (D, H, W for 3-d; H, W for 2-d; W for 1-d). Each
// list is empty (the default: padding 0, stride / dilation / upscale 1), holds one value used
// for every dim, or holds one value per dim.
struct ConvParams {
  std::vector<std::int64_t> padding;   // zeros added on both sides, ≥ 0 and < the filter extent
  std::vector<std::int64_t> stride;    // ≥ 1
  std::vector<std::int64_t> dilation;  // ≥ 1: filter taps dil apart
  std::vector<std::int64_t> upscale;   // ≥ 1: the input repeated up times along the dim first
};

enum class ConvDirection { fprop, bprop, update };

// One convolution geometry, checked once and reusable for any number of calls (the cuDNN
// descriptor / CUTLASS can_implement-initialize-run idea): the shapes and parameters are
// validated and the output shape computed at construction; each call then checks only that its
// arrays match the plan. Plans are immutable, so one plan may run on several threads at once.
class ConvPlan {
 public:
  // input_shape (C, [D, [H,]] W, N) and filter_shape (C, [T, [R,]] S, K) of equal rank 3–5.
  // Throws ShapeError (ranks, channel counts, a filter wider than the padded input) or
  // ValueError (negative padding, padding that reaches past the filter, non-positive stride,
  // dilation or upscale, a parameter list of the wrong length).
  ConvPlan(const Shape& input_shape, const Shape& filter_shape, const ConvParams& params = {});

  int spatial_dims() const { return dims_; }
  const Shape& input_shape() const { return input_shape_; }
  const Shape& filter_shape() const { return filter_shape_; }
  const Shape& output_shape() const { return output_shape_; }
  // The resolved parameters, one entry per spatial dim.
  const ConvParams& params() const { return params_; }
  // Bytes of scratch one call in `direction` takes for operands of `dtype` (the lowered-operand
  // blocks; the GEMM's own packing buffers come on top).
  std::size_t workspace_bytes(ConvDirection direction, DType dtype) const;
  // "input (C, H, W, N) = (3, 32, 32, 8), filter …, padding 1, stride 1, …", for messages.
  std::string describe() const;

  // O = alpha · conv(I, F) + beta · O. Throws ShapeError (an operand whose shape does not match
  // the plan; the message gives the expected shape), DTypeError, DeviceError, ValueError (the
  // output overlapping an input, a broadcast output, non-finite alpha / beta). Nothing is
  // written when it throws. On CUDA (sm_90a), integer products run as implicit GEMMs on the int8
  // tensor cores when the batch is a multiple of 8 (16 for u8 spikes), n is the unit stride and
  // there is no upscale; f32 and other layouts run on direct exact kernels. Either way the
  // result is the same exact, deterministic one.
  void fprop(const Array& input, const Array& filter, const Array& output,
             const ConvOptions& options = {}) const;
  // gradI = alpha · ∂⟨O, E⟩/∂I + beta · gradI, where E has the output's shape.
  void bprop(const Array& filter, const Array& grad_output, const Array& grad_input,
             const ConvOptions& options = {}) const;
  // gradF = alpha · ∂⟨O, E⟩/∂F + beta · gradF (summed over the batch and every output position).
  void update(const Array& input, const Array& grad_output, const Array& grad_filter,
              const ConvOptions& options = {}) const;

  // The kernel the call in `direction` would run on (x, y, out) — fprop's (input, filter,
  // output), bprop's (filter, grad_output, grad_input), update's (input, grad_output,
  // grad_filter) — by its stable name ("cpu.avx2", "cuda.implicit_gemm.lean", …; the list is in
  // docs/kernels.md), without running it. The arrays are checked as the call checks them (and
  // throw alike); the plan of the call's problem class is made now when it is new (so
  // FLEXKIT_LOG=1 prints it) and kept for the call. "none" for an empty batch. Under
  // IwlPolicy::exact the name is the storing pass's at the output's current exponent.
  std::string kernel_name(ConvDirection direction, const Array& x, const Array& y, const Array& out,
                          const ConvOptions& options = {}) const;

 private:
  int dims_ = 0;
  Shape input_shape_, filter_shape_, output_shape_;
  ConvParams params_;
};

// The output shape (K, M, P, Q, N) of a geometry; throws as ConvPlan does.
Shape conv_output_shape(const Shape& input_shape, const Shape& filter_shape,
                        const ConvParams& params = {});

// A plan for the geometry, from a small process-wide cache (built on first use).
std::shared_ptr<const ConvPlan> conv_plan(const Shape& input_shape, const Shape& filter_shape,
                                          const ConvParams& params = {});

// The same calls through the plan cache: the geometry comes from input / grad_input / filter.
void fprop(const Array& input, const Array& filter, const Array& output,
           const ConvParams& params = {}, const ConvOptions& options = {});
void bprop(const Array& filter, const Array& grad_output, const Array& grad_input,
           const ConvParams& params = {}, const ConvOptions& options = {});
void update(const Array& input, const Array& grad_output, const Array& grad_filter,
            const ConvParams& params = {}, const ConvOptions& options = {});
// ConvPlan::kernel_name through the plan cache (x, y, out in the direction's operand order).
std::string conv_kernel_name(ConvDirection direction, const Array& x, const Array& y,
                             const Array& out, const ConvParams& params = {},
                             const ConvOptions& options = {});

// Layout helpers, contiguous copies. PyTorch's NCW / NCHW / NCDHW activations and its
// (K, C, [T, [R,]] S) weights both move their leading axis to the end to become the seed's
// layouts: (N, C, H, W) → (C, H, W, N) and (K, C, R, S) → (C, R, S, K). from_conv_layout moves
// the last axis back to the front. Rank 3–5; flex16 keeps its iwl.
Array to_conv_layout(const Array& x);
Array from_conv_layout(const Array& x);

}  // namespace flexkit
