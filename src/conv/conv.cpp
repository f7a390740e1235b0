// ConvPlan's calls: checking each call's arrays against the plan, normalising them into a
// ConvProblem (strides, not copies, wherever the layout allows), the iwl policies and the
// statistics, then the CPU or CUDA kernels (the same ConvProblem either way). The exact policy
// runs the convolution twice, measuring and then storing, as dot() does.
#include <array>
#include <cmath>
#include <optional>
#include <string>

#include "backend/cuda/conv/conv_direct.hpp"
#include "conv/conv_cpu.hpp"
#include "conv/conv_internal.hpp"
#include "core/text.hpp"
#include "flexkit/conv.hpp"
#include "flexkit/cuda.hpp"
#include "flexkit/error.hpp"
#include "flexkit/expr.hpp"
#include "flexkit/flex16.hpp"
#include "gemm/exact_output.hpp"

namespace flexkit {
namespace conv {

using detail::cat;
using gemm::ElementKind;
using gemm::kind_of;

Geometry geometry_of(const ConvPlan& plan) {
  Geometry g;
  const int dims = plan.spatial_dims(), rank = dims + 2;
  const Shape& in = plan.input_shape();
  const Shape& f = plan.filter_shape();
  const Shape& o = plan.output_shape();
  const ConvParams& p = plan.params();
  g.C = in[0];
  g.N = in[static_cast<std::size_t>(rank - 1)];
  g.K = f[static_cast<std::size_t>(rank - 1)];
  for (int i = 0; i < dims; ++i) {
    const auto a = static_cast<std::size_t>(i);
    const int d = 3 - dims + i;
    g.in[d] = in[a + 1];
    g.flt[d] = f[a + 1];
    g.out[d] = o[a + 1];
    g.pad[d] = p.padding[a];
    g.str[d] = p.stride[a];
    g.dil[d] = p.dilation[a];
    g.up[d] = p.upscale[a];
  }
  return g;
}

void require_defined(const char* operation, std::initializer_list<const Array*> arrays) {
  for (const Array* a : arrays)
    if (!a->defined()) throw ValueError(cat(operation, ": an operand is an empty Array handle"));
}

namespace {

// A (C-or-K, [d0, [d1,]] d2, N-or-K) array as a 3-spatial-dim operand.
Operand operand_of(const Array& x) {
  Operand r;
  r.data = x.data();
  r.kind = kind_of(x.dtype());
  const int rank = x.rank(), dims = rank - 2;
  r.stride[0] = x.strides()[0];
  r.stride[4] = x.strides()[static_cast<std::size_t>(rank - 1)];
  for (int i = 0; i < dims; ++i)
    r.stride[1 + 3 - dims + i] = x.strides()[static_cast<std::size_t>(1 + i)];
  return r;
}

// The one stride that steps through axes [first, last] of x in row-major order, if their
// layout allows it (size-1 axes do not matter).
std::optional<std::int64_t> collapsed_stride(const Array& x, int first, int last) {
  std::optional<std::int64_t> unit;
  std::int64_t span = 1;  // elements the inner collapsed axes cover
  for (int i = last; i >= first; --i) {
    const std::int64_t extent = x.dim(i), stride = x.strides()[static_cast<std::size_t>(i)];
    if (extent == 1) continue;
    if (!unit) {
      unit = stride;
    } else if (stride != *unit * span) {
      return std::nullopt;
    }
    span *= extent;
  }
  return unit ? unit : std::optional<std::int64_t>(1);
}

// What one direction calls its operands, for messages, and how its output becomes a matrix.
struct Direction {
  const char* name;
  const char* x_name;
  const char* y_name;
  const char* out_name;
  bool x_may_be_u8;       // fprop / update: spikes as the input
  bool output_rows_lead;  // output matrix rows are axis 0 (fprop, bprop), else all but the last
};

constexpr Direction kFprop{"fprop", "input", "filter", "output", true, true};
constexpr Direction kBprop{"bprop", "filter", "grad_output", "grad_input", false, true};
constexpr Direction kUpdate{"update", "input", "grad_output", "grad_filter", true, false};

std::string operands_text(const Direction& d, const Array& x, const Array& y, const Array& out) {
  return cat(d.x_name, " ", x.describe(), ", ", d.y_name, " ", y.describe(), ", ", d.out_name, " ",
             out.describe());
}

void check_shape(const Direction& d, const ConvPlan& plan, const char* role, const Array& a,
                 const Shape& expected, const std::string& axes) {
  if (a.shape() != expected)
    throw ShapeError(cat("conv ", d.name, ": ", role, " has shape ", shape_str(a.shape()),
                         "; expected ", axes, " = ", shape_str(expected), " for ",
                         plan.describe()));
}

std::string axes(const char* outer, const char* const names[3], int dims, const char* inner) {
  std::string s = cat("(", outer);
  for (int i = 3 - dims; i < 3; ++i) s += cat(", ", names[i]);
  return s + cat(", ", inner, ")");
}

constexpr const char* kInputAxes[3] = {"D", "H", "W"};
constexpr const char* kFilterAxes[3] = {"T", "R", "S"};
constexpr const char* kOutputAxes[3] = {"M", "P", "Q"};

void check_call(const Direction& d, const ConvPlan& plan, const Array& x, const Array& y,
                const Array& out, const ConvOptions& o) {
  require_defined(d.name, {&x, &y, &out});
  const int dims = plan.spatial_dims();
  const std::string in_axes = axes("C", kInputAxes, dims, "N");
  const std::string f_axes = axes("C", kFilterAxes, dims, "K");
  const std::string o_axes = axes("K", kOutputAxes, dims, "N");
  if (&d == &kFprop) {
    check_shape(d, plan, "input", x, plan.input_shape(), in_axes);
    check_shape(d, plan, "filter", y, plan.filter_shape(), f_axes);
    check_shape(d, plan, "output", out, plan.output_shape(), o_axes);
  } else if (&d == &kBprop) {
    check_shape(d, plan, "filter", x, plan.filter_shape(), f_axes);
    check_shape(d, plan, "grad_output", y, plan.output_shape(), o_axes);
    check_shape(d, plan, "grad_input", out, plan.input_shape(), in_axes);
  } else {
    check_shape(d, plan, "input", x, plan.input_shape(), in_axes);
    check_shape(d, plan, "grad_output", y, plan.output_shape(), o_axes);
    check_shape(d, plan, "grad_filter", out, plan.filter_shape(), f_axes);
  }
  if (!(x.device() == out.device()) || !(y.device() == out.device()))
    throw DeviceError(
        cat("conv ", d.name, ": operands are on different devices: ", operands_text(d, x, y, out)));
  const DType tx = x.dtype(), ty = y.dtype(), to = out.dtype();
  const bool float_product = tx == DType::f32 && ty == DType::f32 && to == DType::f32;
  const bool integer_product = (tx == DType::flex16 || (d.x_may_be_u8 && tx == DType::u8)) &&
                               ty == DType::flex16 && (to == DType::flex16 || to == DType::f32);
  if (!float_product && !integer_product)
    throw DTypeError(
        cat("conv ", d.name, ": unsupported types ", d.x_name, " ", dtype_name(tx), ", ", d.y_name,
            " ", dtype_name(ty), " → ", d.out_name, " ", dtype_name(to),
            "; supported: f32 with f32 into f32, flex16 with flex16",
            d.x_may_be_u8 ? (std::string(" or a u8 ") + d.x_name + " with flex16") : std::string(),
            " into flex16 or f32"));
  if (to != DType::flex16 && (o.iwl || o.iwl_policy != IwlPolicy::fixed))
    throw DTypeError(cat("conv ", d.name, ": an iwl or iwl policy was given but ", d.out_name, " ",
                         out.describe(), " is not flex16"));
  if (o.iwl) check_iwl(*o.iwl, d.name);
  if (!std::isfinite(o.alpha) || !std::isfinite(o.beta))
    throw ValueError(cat("conv ", d.name, ": alpha and beta must be finite; got alpha ", o.alpha,
                         ", beta ", o.beta));
  if (!out.writable() || gemm::self_overlapping(out))
    throw ValueError(cat("conv ", d.name, ": ", d.out_name, " ", out.describe(),
                         " is a read-only or broadcast view (several of its elements share "
                         "memory); pass an array that owns each element"));
  if (gemm::overlaps(out, x) || gemm::overlaps(out, y))
    throw ValueError(cat("conv ", d.name, ": ", d.out_name, " overlaps an input (",
                         operands_text(d, x, y, out),
                         "); the convolution would read what it writes — pass a separate array"));
}

// The output as the matrix ConvProblem::out describes, when its layout allows.
std::optional<gemm::OutputRef> output_matrix(const Direction& d, const Array& out) {
  const int last = out.rank() - 1;
  gemm::OutputRef r;
  r.data = out.data();
  r.kind = kind_of(out.dtype());
  if (d.output_rows_lead) {
    auto cols = collapsed_stride(out, 1, last);
    if (!cols) return std::nullopt;
    r.row_stride = out.strides()[0];
    r.col_stride = *cols;
  } else {
    auto rows = collapsed_stride(out, 0, last - 1);
    if (!rows) return std::nullopt;
    r.row_stride = *rows;
    r.col_stride = out.strides()[static_cast<std::size_t>(last)];
  }
  return r;
}

// Runs one direction on the operands' device (check_call put them all on one).
gemm::ExactStats run_kernels(const Direction& d, const ConvProblem& p, Device device) {
  if (device.is_cuda()) {
    void* stream = cuda::current_stream(device.index);
    if (&d == &kFprop) return fprop_cuda(p, device.index, stream);
    if (&d == &kBprop) return bprop_cuda(p, device.index, stream);
    return update_cuda(p, device.index, stream);
  }
  if (&d == &kFprop) return gemm::known_stats(fprop_cpu(p));
  if (&d == &kBprop) return gemm::known_stats(bprop_cpu(p));
  return gemm::known_stats(update_cpu(p));
}

void run(const Direction& d, const ConvPlan& plan, const Array& x, const Array& y_in,
         const Array& out, const ConvOptions& o) {
  check_call(d, plan, x, y_in, out, o);
  if (plan.input_shape().back() == 0) {
    // An empty batch: fprop's and bprop's outputs are empty; update's sums have no terms, so
    // grad_filter = beta · grad_filter (as dot does for an empty inner dimension).
    Array target = out;  // a handle: writes go through to the caller's elements
    if (out.dtype() == DType::flex16 && o.iwl) target.set_iwl(*o.iwl);
    if (out.size() == 0) {
      if (out.dtype() == DType::flex16)
        gemm::record_flex16_result(out, out.iwl(),
                                   gemm::known_stats(portable::gemm_stats_identity()));
      return;
    }
    if (o.beta == 0.0) {
      target.fill(0.0);
    } else {
      assign(out, Expr(out) * o.beta);
    }
    return;
  }
  Array y = y_in;
  // update reads E as a K × (M·P·Q·N) matrix: other layouts go through a contiguous copy.
  if (&d == &kUpdate && !collapsed_stride(y, 1, y.rank() - 1)) y = y.contiguous();
  // An output whose axes do not collapse into a matrix is computed into a contiguous copy
  // (holding the old values when beta accumulates) and copied back.
  std::optional<gemm::OutputRef> matrix = output_matrix(d, out);
  Array work = out;
  if (!matrix) {
    work = o.beta != 0.0 ? out.clone() : Array::empty(out.shape(), out.dtype(), out.device());
    if (out.dtype() == DType::flex16) work.set_iwl(out.iwl());
    matrix = output_matrix(d, work);
  }
  ConvProblem p;
  p.g = geometry_of(plan);
  p.x = operand_of(x);
  p.y = operand_of(y);
  p.out = *matrix;
  p.alpha = static_cast<float>(o.alpha);
  p.beta = static_cast<float>(o.beta);
  const bool flex_out = out.dtype() == DType::flex16;
  int out_iwl = 0;
  gemm::ExactStats stats;
  if (x.dtype() == DType::f32) {
    stats = run_kernels(d, p, out.device());
  } else {
    const gemm::ExactOutput exact = gemm::exact_output(x, y, work, o.alpha, o.beta);
    out_iwl = flex_out ? (o.iwl ? *o.iwl : out.iwl()) : 0;
    if (flex_out && o.iwl_policy == IwlPolicy::exact) {
      p.epilogue = gemm::make_epilogue(exact, out_iwl);
      p.mode = gemm::EpilogueMode::measure;
      out_iwl = gemm::exact_iwl(run_kernels(d, p, out.device()).value, exact);
    }
    p.epilogue = gemm::make_epilogue(exact, out_iwl);
    p.mode = gemm::EpilogueMode::store;
    stats = run_kernels(d, p, out.device());
  }
  if (!work.shares_storage(out)) {
    Array target = out;  // a handle: writes go through to the caller's elements
    if (flex_out) target.set_iwl(out_iwl);
    if (flex_out) work.set_iwl(out_iwl);
    target.assign(work);
  }
  if (flex_out) gemm::record_flex16_result(out, out_iwl, stats);
}

}  // namespace
}  // namespace conv

void ConvPlan::fprop(const Array& input, const Array& filter, const Array& output,
                     const ConvOptions& options) const {
  conv::run(conv::kFprop, *this, input, filter, output, options);
}

void ConvPlan::bprop(const Array& filter, const Array& grad_output, const Array& grad_input,
                     const ConvOptions& options) const {
  conv::run(conv::kBprop, *this, filter, grad_output, grad_input, options);
}

void ConvPlan::update(const Array& input, const Array& grad_output, const Array& grad_filter,
                      const ConvOptions& options) const {
  conv::run(conv::kUpdate, *this, input, grad_output, grad_filter, options);
}

}  // namespace flexkit
