// ConvPlan's geometry: validating shapes and parameters once, the output size, the plan cache,
// and the layout helpers.
#include <algorithm>
#include <list>
#include <mutex>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "conv/conv_cpu.hpp"
#include "conv/conv_internal.hpp"
#include "core/text.hpp"
#include "flexkit/conv.hpp"
#include "flexkit/error.hpp"

namespace flexkit {
namespace {

using detail::cat;

// Axis names per spatial dim, outermost first, for 3 dims; fewer dims use the last ones.
constexpr const char* kInputDims[3] = {"D", "H", "W"};
constexpr const char* kFilterDims[3] = {"T", "R", "S"};
constexpr const char* kOutputDims[3] = {"M", "P", "Q"};

std::string axes_text(const char* outer, const char* const names[3], int dims, const char* inner) {
  std::string s = cat("(", outer);
  for (int d = 3 - dims; d < 3; ++d) s += cat(", ", names[d]);
  return s + cat(", ", inner, ")");
}

std::string list_text(const std::vector<std::int64_t>& v) {
  std::string s = "(";
  for (std::size_t i = 0; i < v.size(); ++i) s += cat(i ? ", " : "", v[i]);
  return s + ")";
}

// One parameter list resolved to one value per dim.
std::vector<std::int64_t> resolve(const std::vector<std::int64_t>& given, std::int64_t fallback,
                                  int dims, const char* name) {
  if (given.empty()) return std::vector<std::int64_t>(static_cast<std::size_t>(dims), fallback);
  if (given.size() == 1) return std::vector<std::int64_t>(static_cast<std::size_t>(dims), given[0]);
  if (static_cast<int>(given.size()) != dims)
    throw ValueError(cat("conv: ", name, " has ", given.size(), " values ", list_text(given),
                         " for a convolution with ", dims,
                         " spatial dims; give one value, or one per dim"));
  return given;
}

int spatial_dims_of(const Shape& input_shape, const Shape& filter_shape) {
  const int rank = static_cast<int>(input_shape.size());
  if (rank < 3 || rank > 5)
    throw ShapeError(cat("conv: the input must have rank 3, 4 or 5 (C, [D, [H,]] W, N); got shape ",
                         shape_str(input_shape)));
  if (static_cast<int>(filter_shape.size()) != rank)
    throw ShapeError(cat("conv: the filter must have the input's rank ", rank,
                         " (C, [T, [R,]] S, K); got input ", shape_str(input_shape), ", filter ",
                         shape_str(filter_shape)));
  return rank - 2;
}

ConvParams resolve_params(const ConvParams& p, int dims) {
  ConvParams r;
  r.padding = resolve(p.padding, 0, dims, "padding");
  r.stride = resolve(p.stride, 1, dims, "stride");
  r.dilation = resolve(p.dilation, 1, dims, "dilation");
  r.upscale = resolve(p.upscale, 1, dims, "upscale");
  return r;
}

}  // namespace

ConvPlan::ConvPlan(const Shape& input_shape, const Shape& filter_shape, const ConvParams& params)
    : dims_(spatial_dims_of(input_shape, filter_shape)),
      input_shape_(input_shape),
      filter_shape_(filter_shape),
      params_(resolve_params(params, dims_)) {
  const int rank = dims_ + 2;
  const std::string shapes =
      cat("input ", axes_text("C", kInputDims, dims_, "N"), " = ", shape_str(input_shape),
          ", filter ", axes_text("C", kFilterDims, dims_, "K"), " = ", shape_str(filter_shape));
  // The batch may be empty (as in PyTorch): fprop's and bprop's outputs are then empty and
  // update's sums have no terms.
  for (std::size_t i = 0; i + 1 < input_shape.size(); ++i)
    if (input_shape[i] < 1)
      throw ShapeError(cat("conv: every extent but the batch must be at least 1; got ", shapes));
  if (!input_shape.empty() && input_shape.back() < 0)
    throw ShapeError(cat("conv: the batch must be at least 0; got ", shapes));
  for (std::int64_t extent : filter_shape)
    if (extent < 1) throw ShapeError(cat("conv: every extent must be at least 1; got ", shapes));
  if (input_shape[0] != filter_shape[0])
    throw ShapeError(cat("conv: the input has ", input_shape[0], " channels but the filter has ",
                         filter_shape[0], " (", shapes, ")"));
  auto check_positive = [&](const std::vector<std::int64_t>& v, const char* name) {
    for (std::int64_t x : v)
      if (x < 1)
        throw ValueError(
            cat("conv: ", name, " must be at least 1 in every dim; got ", list_text(v)));
  };
  check_positive(params_.stride, "stride");
  check_positive(params_.dilation, "dilation");
  check_positive(params_.upscale, "upscale");
  output_shape_ = Shape(static_cast<std::size_t>(rank));
  output_shape_[0] = filter_shape[static_cast<std::size_t>(rank - 1)];
  output_shape_[static_cast<std::size_t>(rank - 1)] =
      input_shape[static_cast<std::size_t>(rank - 1)];
  for (int i = 0; i < dims_; ++i) {
    const auto a = static_cast<std::size_t>(i);
    const int name = 3 - dims_ + i;
    const std::int64_t in = input_shape[a + 1], taps = filter_shape[a + 1];
    const std::int64_t pad = params_.padding[a], str = params_.stride[a], dil = params_.dilation[a],
                       up = params_.upscale[a];
    const std::int64_t extent = dil * (taps - 1) + 1;
    if (pad < 0)
      throw ValueError(cat("conv: padding must be ≥ 0; got ", list_text(params_.padding)));
    if (pad >= extent)
      throw ValueError(cat("conv: padding ", pad, " along ", kInputDims[name],
                           " is not smaller than the filter's extent ", extent, " (dilation ", dil,
                           " · (", kFilterDims[name],
                           " − 1) + 1): the edge outputs would see "
                           "nothing but padding (",
                           shapes, ")"));
    const std::int64_t padded = in * up + 2 * pad;
    if (padded < extent)
      throw ShapeError(cat("conv: the filter's extent ", extent, " along ", kInputDims[name],
                           " is larger than the padded input (", kInputDims[name],
                           "·upscale + 2·pad = ", in, "·", up, " + 2·", pad, " = ", padded, "; ",
                           shapes, ")"));
    output_shape_[a + 1] = (padded - extent) / str + 1;
  }
}

std::string ConvPlan::describe() const {
  return cat("input ", axes_text("C", kInputDims, dims_, "N"), " = ", shape_str(input_shape_),
             ", filter ", axes_text("C", kFilterDims, dims_, "K"), " = ", shape_str(filter_shape_),
             ", padding ", list_text(params_.padding), ", stride ", list_text(params_.stride),
             ", dilation ", list_text(params_.dilation), ", upscale ", list_text(params_.upscale));
}

std::size_t ConvPlan::workspace_bytes(ConvDirection direction, DType dtype) const {
  const conv::Geometry g = conv::geometry_of(*this);
  const std::size_t element = dtype == DType::f32 ? 4 : (dtype == DType::u8 ? 1 : 2);
  switch (direction) {
    case ConvDirection::fprop:
      return conv::fprop_workspace_bytes(g, element);
    case ConvDirection::bprop:
      return conv::bprop_workspace_bytes(g, element);
    case ConvDirection::update:
      break;
  }
  return conv::update_workspace_bytes(g, element);
}

Shape conv_output_shape(const Shape& input_shape, const Shape& filter_shape,
                        const ConvParams& params) {
  return ConvPlan(input_shape, filter_shape, params).output_shape();
}

std::shared_ptr<const ConvPlan> conv_plan(const Shape& input_shape, const Shape& filter_shape,
                                          const ConvParams& params) {
  // Keyed by the resolved parameters, so {1} and {1, 1} share a plan; least recently used
  // first out.
  constexpr std::size_t kCapacity = 64;
  using Key = std::tuple<Shape, Shape, std::vector<std::int64_t>, std::vector<std::int64_t>,
                         std::vector<std::int64_t>, std::vector<std::int64_t>>;
  static std::mutex mutex;
  static std::list<std::pair<Key, std::shared_ptr<const ConvPlan>>> cache;
  const ConvParams r = resolve_params(params, spatial_dims_of(input_shape, filter_shape));
  Key key{input_shape, filter_shape, r.padding, r.stride, r.dilation, r.upscale};
  {
    std::lock_guard<std::mutex> lock(mutex);
    for (auto it = cache.begin(); it != cache.end(); ++it)
      if (it->first == key) {
        cache.splice(cache.begin(), cache, it);
        return cache.front().second;
      }
  }
  auto plan = std::make_shared<const ConvPlan>(input_shape, filter_shape, r);  // may throw
  std::lock_guard<std::mutex> lock(mutex);
  cache.emplace_front(std::move(key), plan);
  if (cache.size() > kCapacity) cache.pop_back();
  return plan;
}

void fprop(const Array& input, const Array& filter, const Array& output, const ConvParams& params,
           const ConvOptions& options) {
  conv::require_defined("fprop", {&input, &filter, &output});
  conv_plan(input.shape(), filter.shape(), params)->fprop(input, filter, output, options);
}

void bprop(const Array& filter, const Array& grad_output, const Array& grad_input,
           const ConvParams& params, const ConvOptions& options) {
  conv::require_defined("bprop", {&filter, &grad_output, &grad_input});
  conv_plan(grad_input.shape(), filter.shape(), params)
      ->bprop(filter, grad_output, grad_input, options);
}

void update(const Array& input, const Array& grad_output, const Array& grad_filter,
            const ConvParams& params, const ConvOptions& options) {
  conv::require_defined("update", {&input, &grad_output, &grad_filter});
  conv_plan(input.shape(), grad_filter.shape(), params)
      ->update(input, grad_output, grad_filter, options);
}

std::string conv_kernel_name(ConvDirection direction, const Array& x, const Array& y,
                             const Array& out, const ConvParams& params,
                             const ConvOptions& options) {
  conv::require_defined("conv kernel_name", {&x, &y, &out});
  const Shape& input_shape = direction == ConvDirection::bprop ? out.shape() : x.shape();
  const Shape& filter_shape = direction == ConvDirection::fprop   ? y.shape()
                              : direction == ConvDirection::bprop ? x.shape()
                                                                  : out.shape();
  return conv_plan(input_shape, filter_shape, params)->kernel_name(direction, x, y, out, options);
}

namespace {

Array move_axis(const Array& x, bool leading_to_end, const char* operation) {
  if (!x.defined()) throw ValueError(cat(operation, ": the array is an empty Array handle"));
  if (x.rank() < 3 || x.rank() > 5)
    throw ShapeError(
        cat(operation, ": expected rank 3, 4 or 5 (1-3 spatial dims); got ", x.describe()));
  std::vector<int> perm(static_cast<std::size_t>(x.rank()));
  std::iota(perm.begin(), perm.end(), 0);
  if (leading_to_end)
    std::rotate(perm.begin(), perm.begin() + 1, perm.end());
  else
    std::rotate(perm.begin(), perm.end() - 1, perm.end());
  return x.transpose(perm).clone();
}

}  // namespace

Array to_conv_layout(const Array& x) {
  return move_axis(x, true, "to_conv_layout");
}

Array from_conv_layout(const Array& x) {
  return move_axis(x, false, "from_conv_layout");
}

}  // namespace flexkit
