#include "nn/heavy_ops.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>
#include <vector>

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

// The padded input seen as every tap of every output position, (c, r, s, p, q, b): tap (r, s)
// of position (p, q) is element (r + p·stride_h, s + q·stride_w), so one overlapping view holds
// them all and a gather is one launch (which also widens u8 spikes).
Array tap_windows(const Geometry& g, const Array& input) {
  const Array padded = padded_input(input, g).contiguous();
  const Strides& st = padded.strides();
  return Array::from_external(padded.data(), padded.dtype(), {g.c, g.r, g.s, g.p, g.q, g.b},
                              {st[0], st[1], st[2], g.stride_h * st[1], g.stride_w * st[2], st[3]},
                              padded.device(), std::make_shared<Array>(padded), /*writable=*/false,
                              padded.dtype() == DType::flex16 ? padded.iwl() : 0);
}

// The column matrix of channels [c0, c1) and output rows [p0, p1): rows ordered (c, r, s) as the
// filter's (C, R, S, K) flattens, columns (p, q, b). f32, or (`keep_dtype`) in the input's own
// dtype and exponent, exactly.
Array gather_columns(const Geometry& g, const Array& windows, std::int64_t c0, std::int64_t c1,
                     std::int64_t p0, std::int64_t p1, bool keep_dtype = false) {
  Array columns = Array::empty({c1 - c0, g.r, g.s, p1 - p0, g.q, g.b},
                               keep_dtype ? windows.dtype() : DType::f32, windows.device());
  if (columns.dtype() == DType::flex16) columns.set_iwl(windows.iwl());
  assign(columns, Expr(windows(slice(c0, c1), all, all, slice(p0, p1), all, all)));
  return columns.reshape({(c1 - c0) * g.r * g.s, (p1 - p0) * g.q * g.b});
}

// A wide convolution's lowered products run in bands whose column matrix (or column gradient)
// holds at most this much, so that the columns never take more memory than that: the forward by
// output rows, the gradients by input channels (each band then a whole product of its own). The
// bands stay large products.
constexpr double kColumnBandBytes = double(std::size_t{256} << 20);

// [begin, end) ranges splitting n into about as many parts as the columns need bands.
std::vector<std::pair<std::int64_t, std::int64_t>> bands(const Geometry& g, std::int64_t n) {
  const double bytes = 4.0 * double(g.c * g.r * g.s) * double(g.p * g.q * g.b);
  const auto wanted = static_cast<std::int64_t>(std::ceil(bytes / kColumnBandBytes));
  const std::int64_t count = std::clamp<std::int64_t>(wanted, 1, std::max<std::int64_t>(1, n));
  const std::int64_t each = (n + count - 1) / count;
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  for (std::int64_t b = 0; b < n; b += each) out.emplace_back(b, std::min(n, b + each));
  return out;
}

// Along one spatial axis: input positions whose covering taps are the same. Input position i
// (padded position i + pad) takes tap r from output position p when i + pad = r + stride·p.
// Positions of one residue class (i + pad) mod stride meet the taps of that class, tap r at
// class index m = t + p (r = class + stride·t); cut where a tap starts or stops covering.
struct AxisPiece {
  std::int64_t first, count, step;                          // input positions first + step·j
  std::vector<std::pair<std::int64_t, std::int64_t>> taps;  // (r, output position of j = 0)
};

std::vector<AxisPiece> axis_pieces(std::int64_t size, std::int64_t pad, std::int64_t stride,
                                   std::int64_t taps, std::int64_t outputs) {
  std::vector<AxisPiece> out;
  for (std::int64_t cls = 0; cls < stride; ++cls) {
    const std::int64_t first = ((cls - pad) % stride + stride) % stride;  // first i of the class
    if (first >= size) continue;
    const std::int64_t count = (size - first + stride - 1) / stride;
    const std::int64_t m0 = (first + pad - cls) / stride;
    std::vector<std::int64_t> cuts{m0, m0 + count};
    for (std::int64_t r = cls; r < taps; r += stride) {
      const std::int64_t t = (r - cls) / stride;
      for (std::int64_t m : {t, t + outputs})
        if (m > m0 && m < m0 + count) cuts.push_back(m);
    }
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    for (std::size_t c = 0; c + 1 < cuts.size(); ++c) {
      const std::int64_t a = cuts[c], b = cuts[c + 1];
      AxisPiece piece{first + stride * (a - m0), b - a, stride, {}};
      for (std::int64_t r = cls; r < taps; r += stride) {
        const std::int64_t t = (r - cls) / stride;
        if (t <= a && b <= t + outputs) piece.taps.emplace_back(r, a - t);
      }
      out.push_back(std::move(piece));
    }
  }
  return out;
}

// The input gradient from the column gradient: each input element is the sum of the column
// entries of the taps covering it, in tap order (r, then s). One fused expression per rectangle
// of input positions with the same covering taps, so every column entry is read once and every
// gradient element written once.
void columns_adjoint(const Geometry& g, const Array& columns, const Array& grad_input) {
  const Array cols = columns.reshape({grad_input.dim(0), g.r, g.s, g.p, g.q, g.b});
  const auto rows = axis_pieces(g.h, g.pad_h, g.stride_h, g.r, g.p);
  const auto across = axis_pieces(g.w, g.pad_w, g.stride_w, g.s, g.q);
  for (const AxisPiece& y : rows)
    for (const AxisPiece& x : across) {
      Array target = grad_input(all, slice(y.first, y.first + y.step * (y.count - 1) + 1, y.step),
                                slice(x.first, x.first + x.step * (x.count - 1) + 1, x.step), all);
      if (y.taps.empty() || x.taps.empty()) {
        target.fill(0.0);
        continue;
      }
      std::optional<Expr> sum;
      for (const auto& [r, p0] : y.taps)
        for (const auto& [s, q0] : x.taps) {
          Expr tap(cols(all, r, s, slice(p0, p0 + y.count), slice(q0, q0 + x.count), all));
          sum = sum ? *sum + tap : tap;
        }
      assign(target, *sum);
    }
}

// Filter values per output channel up to which an integer convolution runs over its gathered
// taps: the deep-K kernel's smaller side (backend/cuda/gemm/gemm_deep_k.hpp).
constexpr std::int64_t kGatheredTapsMaxRows = 64;

// Whether an integer fprop or update (a flex16 or u8 input; a flex16 filter or output gradient)
// runs over the input's gathered taps, as a 1×1 convolution over a (C·R·S, P, Q, B) input: forced
// by the route, or automatically on CUDA for a filter of a few taps of a few channels (csnn's
// first layer: one channel, 3 × 3). There the planned kernels took 138 µs (fprop) and 135 µs
// (update) on an H100 for the csnn batch, the update's gather padding the 9 taps to 128-wide
// tiles; a 1×1 fprop with as many outputs (C256 K64 56x56) took 38 µs on the H200. On the CPU
// the gathered taps were slower than the plans (docs/performance-notes.md).
bool over_gathered_taps(const ConvPlan& plan, const Array& input, ConvRoute route) {
  if (route == ConvRoute::planned) return false;
  if (route == ConvRoute::lowered) {
    if (!plain_geometry(plan))
      throw UnsupportedError(
          "the lowered convolution takes 2-d geometries without dilation or upscale");
    return true;
  }
  const Geometry g = geometry(plan);
  return input.device().is_cuda() && plain_geometry(plan) && g.r * g.s > 1 &&
         g.c * g.r * g.s <= kGatheredTapsMaxRows;
}

// The input's taps gathered exactly, in its own dtype and exponent, as a 1×1 convolution's
// (C·R·S, P, Q, B) input.
Array gathered_taps(const Geometry& g, const Array& input) {
  return gather_columns(g, tap_windows(g, input), 0, g.c, 0, g.p, /*keep_dtype=*/true)
      .reshape({g.c * g.r * g.s, g.p, g.q, g.b});
}

bool integer_operands(const Array& input, const Array& other) {
  return input.dtype() != DType::f32 && other.dtype() == DType::flex16;
}

}  // namespace

ConvSaved conv_fprop(const ConvPlan& plan, const Array& input, const Array& filter,
                     const Array& out, bool keep, ConvRoute route, const ConvOptions& options) {
  ConvSaved saved;
  if (integer_operands(input, filter)) {
    if (over_gathered_taps(plan, input, route)) {
      const Geometry g = geometry(plan);
      const Array taps = gathered_taps(g, input);
      conv_plan(taps.shape(), {taps.dim(0), 1, 1, g.k})
          ->fprop(taps, filter.reshape({taps.dim(0), 1, 1, g.k}), out, options);
      if (keep) saved.taps = taps;
    } else {
      plan.fprop(input, filter, out, options);
    }
  } else if (lowered(plan, filter, route)) {  // the column gather widens u8 spikes itself
    const Geometry g = geometry(plan);
    const Array windows = tap_windows(g, input);
    const Array weights = filter.reshape({g.c * g.r * g.s, g.k}).T();
    for (const auto& [p0, p1] : bands(g, g.p))
      matmul(weights, gather_columns(g, windows, 0, g.c, p0, p1),
             out(all, slice(p0, p1), all, all).reshape({g.k, -1}));
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
    const Array weights = filter.reshape({g.c * g.r * g.s, g.k});
    const std::int64_t taps = g.r * g.s;
    for (const auto& [c0, c1] : bands(g, g.c)) {
      Array grad_columns =
          Array::empty({(c1 - c0) * taps, g.p * g.q * g.b}, DType::f32, grad_out.device());
      matmul(weights(slice(c0 * taps, c1 * taps), all), grad_out.reshape({g.k, -1}), grad_columns);
      columns_adjoint(g, grad_columns, grad_input(slice(c0, c1), all, all, all));
    }
    return;
  }
  plan.bprop(filter, grad_out, grad_input, options);
}

void conv_update(const ConvPlan& plan, const ConvSaved& saved, const Array& grad_out,
                 const Array& grad_filter, const ConvOptions& options, ConvRoute route) {
  if (integer_operands(saved.input, grad_out)) {
    if (over_gathered_taps(plan, saved.input, route)) {
      // The filter gradient is then a 1×1 convolution's: the same exact sums, rounded once.
      const Geometry g = geometry(plan);
      const Array taps = saved.taps.defined() ? saved.taps : gathered_taps(g, saved.input);
      conv_plan(taps.shape(), {taps.dim(0), 1, 1, g.k})
          ->update(taps, grad_out, grad_filter.reshape({taps.dim(0), 1, 1, g.k}), options);
    } else {
      plan.update(saved.input, grad_out, grad_filter, options);
    }
    return;
  }
  if (lowered(plan, grad_out, route)) {
    const Geometry g = geometry(plan);
    const Array windows = tap_windows(g, saved.input);
    const Array grads = grad_filter.reshape({g.c * g.r * g.s, g.k});
    const std::int64_t taps = g.r * g.s;
    // gradF (CRS, K) = columns (CRS, PQB) · grad_outᵀ (PQB, K), by bands of its rows
    for (const auto& [c0, c1] : bands(g, g.c))
      matmul(gather_columns(g, windows, c0, c1, 0, g.p), grad_out.reshape({g.k, -1}).T(),
             grads(slice(c0 * taps, c1 * taps), all), options);
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
  return gemm::exact_sums(gather_columns(g, tap_windows(g, saved.input), 0, g.c, 0, g.p, true),
                          grad_out.reshape({g.k, -1}).T());
}

}  // namespace flexkit::nn::heavy
