#include "nn/heavy_ops.hpp"

#include "flexkit/error.hpp"
#include "flexkit/expr.hpp"
#include "flexkit/gemm.hpp"

namespace flexkit::nn::heavy {

namespace {

// Spikes stay u8 between layers in either precision; beside an f32 operand (the f32 products
// take f32 × f32) they are widened to f32 for the call.
Array widened_beside(const Array& x, const Array& other) {
  if (x.dtype() == DType::u8 && other.dtype() == DType::f32) return evaluate(Expr(x), DType::f32);
  return x;
}

}  // namespace

void matmul(const Array& a, const Array& b, const Array& out, const HeavyOpOptions& options) {
  dot(widened_beside(a, b), widened_beside(b, a), out, options);
}

namespace {

struct Geometry {
  std::int64_t c, h, w, b, r, s, k, p, q, stride_h, stride_w, pad_h, pad_w;
};

Geometry geometry(const ConvPlan& plan) {
  const Shape& in = plan.input_shape();
  const Shape& f = plan.filter_shape();
  const Shape& out = plan.output_shape();
  const ConvParams& params = plan.params();
  return {in[0],
          in[1],
          in[2],
          in[3],
          f[1],
          f[2],
          f[3],
          out[1],
          out[2],
          params.stride[0],
          params.stride[1],
          params.padding[0],
          params.padding[1]};
}

bool plain_geometry(const ConvPlan& plan) {
  if (plan.spatial_dims() != 2) return false;
  const ConvParams& p = plan.params();
  for (int d = 0; d < 2; ++d)
    if (p.dilation[d] != 1 || p.upscale[d] != 1) return false;
  return true;
}

// The input's tap (r, s) for every output position: a strided view of the zero-padded input.
Array tap(const Array& padded, const Geometry& g, std::int64_t r, std::int64_t s) {
  return padded(all, slice(r, r + g.stride_h * (g.p - 1) + 1, g.stride_h),
                slice(s, s + g.stride_w * (g.q - 1) + 1, g.stride_w), all);
}

Array padded_input(const Array& input, const Geometry& g) {
  if (g.pad_h == 0 && g.pad_w == 0) return input;
  Array padded =
      Array::zeros({g.c, g.h + 2 * g.pad_h, g.w + 2 * g.pad_w, g.b}, input.dtype(), input.device());
  if (input.dtype() == DType::flex16) padded.set_iwl(input.iwl());  // an exact copy
  padded(all, slice(g.pad_h, g.pad_h + g.h), slice(g.pad_w, g.pad_w + g.w), all).assign(input);
  return padded;
}

// `a` is the f32 operand that decides (the filter or the output gradient).
bool lowered(const ConvPlan& plan, const Array& a, ConvRoute route) {
  if (route == ConvRoute::automatic)
    return a.device().is_cuda() && a.dtype() == DType::f32 && plain_geometry(plan);
  if (route == ConvRoute::lowered && !plain_geometry(plan))
    throw UnsupportedError(
        "the lowered convolution takes 2-d geometries without dilation or upscale");
  return route == ConvRoute::lowered;
}

// The column matrix in f32, or (`keep_dtype`) in the input's own dtype and exponent, exactly.
Array conv_columns(const ConvPlan& plan, const Array& input, bool keep_dtype = false) {
  const Geometry g = geometry(plan);
  const Array padded = padded_input(input, g).contiguous();
  // Rows ordered (c, r, s) as the filter's (C, R, S, K) flattens; columns (p, q, b). Every tap
  // of every output position is one overlapping view of the padded input (tap (r, s) of
  // position (p, q) is element (r + p·stride_h, s + q·stride_w)), so the gather is one launch,
  // which also widens u8 spikes.
  const Strides& st = padded.strides();
  const Array windows =
      Array::from_external(padded.data(), padded.dtype(), {g.c, g.r, g.s, g.p, g.q, g.b},
                           {st[0], st[1], st[2], g.stride_h * st[1], g.stride_w * st[2], st[3]},
                           padded.device(), std::make_shared<Array>(padded), /*writable=*/false,
                           padded.dtype() == DType::flex16 ? padded.iwl() : 0);
  Array columns = Array::empty({g.c, g.r, g.s, g.p, g.q, g.b},
                               keep_dtype ? input.dtype() : DType::f32, input.device());
  if (columns.dtype() == DType::flex16) columns.set_iwl(input.iwl());
  assign(columns, Expr(windows));
  return columns.reshape({g.c * g.r * g.s, g.p * g.q * g.b});
}

void columns_adjoint(const ConvPlan& plan, const Array& columns, const Array& grad_input) {
  const Geometry g = geometry(plan);
  const Array cols = columns.reshape({g.c, g.r, g.s, g.p, g.q, g.b});
  Array padded =
      Array::zeros({g.c, g.h + 2 * g.pad_h, g.w + 2 * g.pad_w, g.b}, DType::f32, columns.device());
  // Taps in a fixed order, so overlapping windows sum deterministically.
  for (std::int64_t r = 0; r < g.r; ++r)
    for (std::int64_t s = 0; s < g.s; ++s) {
      Array t = tap(padded, g, r, s);
      t += Expr(cols(all, r, s, all, all, all));
    }
  assign(grad_input,
         Expr(padded(all, slice(g.pad_h, g.pad_h + g.h), slice(g.pad_w, g.pad_w + g.w), all)));
}

}  // namespace

ConvSaved conv_fprop(const ConvPlan& plan, const Array& input, const Array& filter,
                     const Array& out, bool keep, ConvRoute route, const ConvOptions& options) {
  ConvSaved saved;
  if (lowered(plan, filter, route)) {  // the column gather widens u8 spikes itself
    const Geometry g = geometry(plan);
    const Array columns = conv_columns(plan, input);
    matmul(filter.reshape({g.c * g.r * g.s, g.k}).T(), columns, out.reshape({g.k, -1}));
  } else {
    plan.fprop(widened_beside(input, filter), filter, out, options);
  }
  if (keep) saved.input = input;
  return saved;
}

void conv_bprop(const ConvPlan& plan, const Array& filter, const Array& grad_out,
                const Array& grad_input, ConvRoute route, const ConvOptions& options) {
  if (lowered(plan, grad_out, route)) {
    const Geometry g = geometry(plan);
    Array grad_columns =
        Array::empty({g.c * g.r * g.s, g.p * g.q * g.b}, DType::f32, grad_out.device());
    matmul(filter.reshape({g.c * g.r * g.s, g.k}), grad_out.reshape({g.k, -1}), grad_columns);
    columns_adjoint(plan, grad_columns, grad_input);
    return;
  }
  plan.bprop(filter, grad_out, grad_input, options);
}

void conv_update(const ConvPlan& plan, const ConvSaved& saved, const Array& grad_out,
                 const Array& grad_filter, const ConvOptions& options, ConvRoute route) {
  if (lowered(plan, grad_out, route)) {
    const Geometry g = geometry(plan);
    const Array columns = conv_columns(plan, saved.input);
    // gradF (CRS, K) = columns (CRS, PQB) · grad_outᵀ (PQB, K)
    matmul(columns, grad_out.reshape({g.k, -1}).T(), grad_filter.reshape({g.c * g.r * g.s, g.k}),
           options);
    return;
  }
  plan.update(widened_beside(saved.input, grad_out), grad_out, grad_filter, options);
}

gemm::ExactSums conv_update_sums(const ConvPlan& plan, const ConvSaved& saved,
                                 const Array& grad_out) {
  if (!plain_geometry(plan))
    throw UnsupportedError(
        "exact filter-gradient sums take 2-d convolutions without dilation or upscale");
  const Geometry g = geometry(plan);
  // gradF (CRS, K) = columns (CRS, PQB) · grad_outᵀ (PQB, K): the direct update's exact sums
  // (exact integers do not depend on how the product is cut).
  return gemm::exact_sums(conv_columns(plan, saved.input, true), grad_out.reshape({g.k, -1}).T());
}

}  // namespace flexkit::nn::heavy
