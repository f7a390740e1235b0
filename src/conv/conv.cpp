// ConvPlan's calls: checking each call's arrays against the plan, normalising them into a
// ConvProblem (strides, not copies, wherever the layout allows), the iwl policies and the
// statistics, then the CPU or CUDA kernels of the problem class's plan (the same ConvProblem
// either way). The exact policy runs the convolution twice, measuring and then storing, as dot()
// does. ConvPlan::kernel_name makes the same checks and problem, and names the plan.
#include <array>
#include <cmath>
#include <optional>
#include <string>

#include "backend/cuda/conv/conv_direct.hpp"
#include "conv/conv_cpu.hpp"
#include "conv/conv_internal.hpp"
#include "core/flex16_write.hpp"
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
  const char* name;  // "conv fprop": the operation, in messages
  const char* x_name;
  const char* y_name;
  const char* out_name;
  bool x_may_be_u8;       // fprop / update: spikes as the input
  bool output_rows_lead;  // output matrix rows are axis 0 (fprop, bprop), else all but the last
};

constexpr Direction kFprop{"conv fprop", "input", "filter", "output", true, true};
constexpr Direction kBprop{"conv bprop", "filter", "grad_output", "grad_input", false, true};
constexpr Direction kUpdate{"conv update", "input", "grad_output", "grad_filter", true, false};

const Direction& direction_of(ConvDirection d) {
  return d == ConvDirection::fprop ? kFprop : d == ConvDirection::bprop ? kBprop : kUpdate;
}
ConvDirection direction_of(const Direction& d) {
  return &d == &kFprop   ? ConvDirection::fprop
         : &d == &kBprop ? ConvDirection::bprop
                         : ConvDirection::update;
}

std::string operands_text(const Direction& d, const Array& x, const Array& y, const Array& out) {
  return cat(d.x_name, " ", x.describe(), ", ", d.y_name, " ", y.describe(), ", ", d.out_name, " ",
             out.describe());
}

void check_shape(const Direction& d, const ConvPlan& plan, const char* role, const Array& a,
                 const Shape& expected, const std::string& axes) {
  if (a.shape() != expected)
    throw ShapeError(cat(d.name, ": ", role, " has shape ", shape_str(a.shape()), "; expected ",
                         axes, " = ", shape_str(expected), " for ", plan.describe()));
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
        cat(d.name, ": operands are on different devices: ", operands_text(d, x, y, out)));
  const DType tx = x.dtype(), ty = y.dtype(), to = out.dtype();
  const bool float_product = tx == DType::f32 && ty == DType::f32 && to == DType::f32;
  const bool integer_product = (tx == DType::flex16 || (d.x_may_be_u8 && tx == DType::u8)) &&
                               ty == DType::flex16 && (to == DType::flex16 || to == DType::f32);
  if (!float_product && !integer_product)
    throw DTypeError(
        cat(d.name, ": unsupported types ", d.x_name, " ", dtype_name(tx), ", ", d.y_name, " ",
            dtype_name(ty), " → ", d.out_name, " ", dtype_name(to),
            "; supported: f32 with f32 into f32, flex16 with flex16",
            d.x_may_be_u8 ? (std::string(" or a u8 ") + d.x_name + " with flex16") : std::string(),
            " into flex16 or f32"));
  gemm::check_options(d.name, d.out_name, out, o);
  gemm::check_output_owns_elements(d.name, d.out_name, out);
  if (gemm::overlaps(out, x) || gemm::overlaps(out, y))
    throw ValueError(cat(d.name, ": ", d.out_name, " overlaps an input (",
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

// Runs one direction on the operands' device (check_call put them all on one), as its problem
// class's plan says.
gemm::ExactStats run_kernels(const Direction& d, const ConvProblem& p, Device device) {
  if (device.is_cuda()) {
    void* stream = cuda::current_stream(device.index);
    if (&d == &kFprop) return fprop_cuda(p, device.index, stream);
    if (&d == &kBprop) return bprop_cuda(p, device.index, stream);
    return update_cuda(p, device.index, stream);
  }
  return gemm::known_stats(run_conv_cpu(conv_cpu_plan(direction_of(d), p), direction_of(d), p));
}

// An empty batch: fprop's and bprop's outputs are empty; update's sums have no terms, so
// grad_filter = beta · grad_filter (as dot does for an empty inner dimension).
void run_empty_batch(const Array& out, const ConvOptions& o) {
  if (out.size() > 0) return gemm::scale_output(out, o);
  Array target = out;  // a handle: writes go through to the caller's elements
  if (out.dtype() == DType::flex16 && o.iwl) target.set_iwl(*o.iwl);
  if (out.dtype() == DType::flex16)
    gemm::record_flex16_result(out, out.iwl(), gemm::known_stats(portable::gemm_stats_identity()));
}

// A checked call as the kernels take it: E (update) and the output go through contiguous copies
// where their axes do not collapse into the problem's matrices (the output's copy holds the old
// values where beta reads them and `for_run`; a plan needs only its layout).
struct CallProblem {
  Array y, work;
  ConvProblem p;
};

CallProblem problem_of(const Direction& d, const ConvPlan& plan, const Array& x, const Array& y,
                       const Array& out, const ConvOptions& o, bool for_run) {
  CallProblem c{y, out, {}};
  if (&d == &kUpdate && !collapsed_stride(c.y, 1, c.y.rank() - 1)) c.y = c.y.contiguous();
  std::optional<gemm::OutputRef> matrix = output_matrix(d, out);
  if (!matrix) {
    c.work = for_run && o.beta != 0.0 ? out.clone()
                                      : Array::empty(out.shape(), out.dtype(), out.device());
    if (out.dtype() == DType::flex16) c.work.set_iwl(out.iwl());
    matrix = output_matrix(d, c.work);
  }
  c.p.g = geometry_of(plan);
  c.p.x = operand_of(x);
  c.p.y = operand_of(c.y);
  c.p.out = *matrix;
  c.p.alpha = static_cast<float>(o.alpha);
  c.p.beta = static_cast<float>(o.beta);
  return c;
}

void run_resolved(const Direction& d, const ConvPlan& plan, const Array& x, const Array& y,
                  const Array& out, const ConvOptions& o);

void run(const Direction& d, const ConvPlan& plan, const Array& x, const Array& y, const Array& out,
         const ConvOptions& o) {
  check_call(d, plan, x, y, out, o);
  const detail::Flex16WritePlan write = detail::plan_flex16_write(out, o.iwl_policy, o.iwl, d.name);
  detail::prepare_flex16_write(out, write, false);
  run_resolved(d, plan, x, y, out, gemm::resolved_options(o, write));
  detail::finish_flex16_write(out, write);
}

void run_resolved(const Direction& d, const ConvPlan& plan, const Array& x, const Array& y,
                  const Array& out, const ConvOptions& o) {
  if (plan.input_shape().back() == 0) return run_empty_batch(out, o);
  CallProblem c = problem_of(d, plan, x, y, out, o, true);
  const bool flex_out = out.dtype() == DType::flex16;
  gemm::StoredResult result;
  if (x.dtype() == DType::f32) {
    result.stats = run_kernels(d, c.p, out.device());
  } else {
    result = gemm::run_exact_passes(
        c.p, gemm::exact_output(x, c.y, c.work, o.alpha, o.beta), gemm::fixed_out_iwl(out, o),
        flex_out && o.iwl_policy == IwlPolicy::exact,
        [&](const ConvProblem& pass) { return run_kernels(d, pass, out.device()); });
  }
  if (!c.work.shares_storage(out)) {
    Array target = out;  // a handle: writes go through to the caller's elements
    if (flex_out) target.set_iwl(result.out_iwl);
    if (flex_out) c.work.set_iwl(result.out_iwl);
    target.assign(c.work);
  }
  if (flex_out) gemm::record_flex16_result(out, result.out_iwl, result.stats);
}

std::string kernel_name(const Direction& d, const ConvPlan& plan, const Array& x, const Array& y,
                        const Array& out, const ConvOptions& options) {
  check_call(d, plan, x, y, out, options);
  if (plan.input_shape().back() == 0) return "none";
  const ConvOptions o = gemm::resolved_options(
      options, detail::plan_flex16_write(out, options.iwl_policy, options.iwl, d.name));
  CallProblem c = problem_of(d, plan, x, y, out, o, false);
  if (x.dtype() != DType::f32) {
    // The storing pass at the fixed policy's exponent (the measuring pass plans alike).
    c.p.epilogue = gemm::make_epilogue(gemm::exact_output(x, c.y, c.work, o.alpha, o.beta),
                                       gemm::fixed_out_iwl(out, o));
    c.p.mode = gemm::EpilogueMode::store;
  }
  if (out.device().is_cuda())
    return cuda_plan(direction_of(d), c.p, out.device().index).kernel_name;
  return conv_cpu_plan(direction_of(d), c.p).kernel_name;
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

std::string ConvPlan::kernel_name(ConvDirection direction, const Array& x, const Array& y,
                                  const Array& out, const ConvOptions& options) const {
  return conv::kernel_name(conv::direction_of(direction), *this, x, y, out, options);
}

}  // namespace flexkit
