// The one place where layers call the heavy kernels (matrix products and convolutions), so that
// storage formats and the choice of kernel are decided here and not in every layer.
//
// Convolutions over batch-innermost (C, H, W, B) arrays with filters (C, R, S, K): f32 on CUDA
// runs lowered onto the matrix product (the input's taps gathered once into a column matrix by
// fused copies, then one cuBLAS product per direction): chosen by arithmetic, the direct f32
// kernels being exact-order scalar loops where cuBLAS SGEMM runs at 51 TFLOP/s on the H200
// (bench/RESULTS.md). Integer fprop and update of a few taps (at most 64 filter values per output
// channel, such as a one-channel first layer) run on CUDA over the input's taps gathered exactly,
// as a 1×1 convolution through its ConvPlan; everything else runs through the ConvPlan.
#pragma once
#include "flexkit/array.hpp"
#include "flexkit/conv.hpp"
#include "gemm/exact_sums.hpp"

namespace flexkit::nn::heavy {

// out = a · b + options.beta · out (a, b 2-d views of any strides).
void matmul(const Array& a, const Array& b, const Array& out, const HeavyOpOptions& options = {});

// What a convolution's backward needs from its forward: the input, or its column matrix when
// the lowered form ran.
// What a training forward keeps for the weight gradient: the input only. The lowered form
// gathers its column matrix again in conv_update rather than keeping it from the forward (for the
// csnn preset's second convolution, 0.46 GB kept from forward to backward against one more
// gather of about that many bytes written).
struct ConvSaved {
  Array input;  // (C, H, W, B)
  // (C·R·S, P, Q, B): the input's gathered taps, where fprop ran over them; the update then
  // reads them instead of gathering again (a fill, a copy and a gather fewer).
  Array taps;
};

// automatic: lowered for f32 on CUDA (2-d, no dilation or upscale), over the gathered taps for
// integer products of a few taps on CUDA, planned otherwise; tests force either form on any
// device (`lowered` with integer operands: over the gathered taps, for fprop and update).
enum class ConvRoute { automatic, lowered, planned };

// `options` say how a flex16 output stores (the f32 lowered form takes none).
ConvSaved conv_fprop(const ConvPlan& plan, const Array& input, const Array& filter,
                     const Array& out, bool keep, ConvRoute route = ConvRoute::automatic,
                     const ConvOptions& options = {});
void conv_bprop(const ConvPlan& plan, const Array& filter, const Array& grad_out,
                const Array& grad_input, ConvRoute route = ConvRoute::automatic,
                const ConvOptions& options = {});
// grad_filter = update + options.beta · grad_filter.
void conv_update(const ConvPlan& plan, const ConvSaved& saved, const Array& grad_out,
                 const Array& grad_filter, const ConvOptions& options,
                 ConvRoute route = ConvRoute::automatic);

// The filter gradient's exact integer sums (integer operands: a flex16 or u8 input, a flex16
// output gradient), unrounded, for a data-parallel sum over processes (gemm/exact_sums.hpp):
// (C·R·S) × K, the filter's layout flattened.
gemm::ExactSums conv_update_sums(const ConvPlan& plan, const ConvSaved& saved,
                                 const Array& grad_out);

}  // namespace flexkit::nn::heavy
