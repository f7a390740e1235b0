// Pooling as fused expressions over strided views of the input: output = max (or mean) of the
// kernel² views x[:, r::stride, s::stride, :], one kernel on either backend, no index buffers.
#include "flexkit/expr.hpp"
#include "nn/layer_support.hpp"

namespace flexkit::nn {

using namespace detail;

namespace {

// The view of x4 (C, H, W, B) read by filter tap (r, s) for every output position.
Array tap(const Array& x4, std::int64_t r, std::int64_t s, std::int64_t stride, std::int64_t p,
          std::int64_t q) {
  return x4(all, slice(r, r + stride * (p - 1) + 1, stride),
            slice(s, s + stride * (q - 1) + 1, stride), all);
}

}  // namespace

Expr Pool2d::max_of_taps(const Array& x4, const Shape& out) const {
  std::optional<Expr> e;
  for (std::int64_t r = 0; r < kernel_; ++r)
    for (std::int64_t s = 0; s < kernel_; ++s) {
      Expr t(tap(x4, r, s, stride_, out[1], out[2]));
      e = !e ? t : maximum(*e, t);
    }
  return *e;
}

Pool2d::Pool2d(Mode mode, std::int64_t kernel, std::int64_t stride)
    : mode_(mode), kernel_(kernel), stride_(stride == 0 ? kernel : stride) {
  if (kernel_ <= 0 || stride_ <= 0)
    throw ValueError(cat(describe(), ": kernel and stride must be positive"));
}

std::string Pool2d::describe() const {
  return cat(kind(), "(", kernel_, ", stride=", stride_, ")");
}

Shape Pool2d::output_features(const Shape& input) const {
  if (input.size() != 3)
    throw ShapeError(cat(describe(), ": expects image features (C, H, W), got ", shape_str(input)));
  if (input[1] < kernel_ || input[2] < kernel_)
    throw ShapeError(cat(describe(), ": the window is larger than the input ", shape_str(input)));
  return {input[0], (input[1] - kernel_) / stride_ + 1, (input[2] - kernel_) / stride_ + 1};
}

Array Pool2d::forward(const Array& x) {
  const ActivationShape a = split_activation(x, describe());
  const Shape out = output_features(a.features);
  const Array x4 =
      x.contiguous().reshape({a.features[0], a.features[1], a.features[2], a.merged()});
  const Shape y_shape{out[0], out[1], out[2], a.merged()};
  // The maximum of spikes is a spike: kept u8.
  Array y = mode_ == Mode::max && x.dtype() == DType::u8
                ? Array::empty(y_shape, DType::u8, x.device())
                : new_tensor("output", y_shape, x.device());
  std::optional<Expr> e;
  for (std::int64_t r = 0; r < kernel_; ++r)
    for (std::int64_t s = 0; s < kernel_; ++s) {
      Expr t(tap(x4, r, s, stride_, out[1], out[2]));
      e = !e ? t : (mode_ == Mode::max ? maximum(*e, t) : *e + t);
    }
  if (mode_ == Mode::average) e = *e * (1.0 / static_cast<double>(kernel_ * kernel_));
  assign(y, *e, y.dtype() == DType::flex16 ? writes() : AssignOptions{});
  if (training_) {
    input_ = x4;
    // A flex16 output is a rounding of the maximum, not one of the inputs: backward then
    // compares against the maximum recomputed from the input.
    output_ = y.dtype() == DType::flex16 ? Array() : y;
    output_shape_ = y.shape();
  }
  return y.reshape(with_time_batch(out, a.steps, a.batch));
}

// Windows that tile the input (stride = kernel, H and W multiples of it): the input gradient in
// one expression over the input seen as (C, P, k, Q, k, B), a window's taps along the two k
// axes, written once; tap_order_ tells each element its tap.
Array Pool2d::backward_tiled(const Array& g4) {
  const Shape& xs = input_.shape();
  const Shape& os = output_shape_;
  const Shape six{xs[0], os[1], kernel_, os[2], kernel_, xs[3]};
  const Shape window{xs[0], os[1], 1, os[2], 1, xs[3]};
  const Device device = g4.device();
  const Array g6 = g4.reshape(window);
  Expr value(0.0);
  if (mode_ == Mode::average) {
    value = Expr(g6) * (1.0 / static_cast<double>(kernel_ * kernel_));
  } else {
    // The gradient goes to the first tap holding the maximum, as PyTorch's does.
    const Array x6 = input_.reshape(six);
    auto tap6 = [&](std::int64_t u) {
      const std::int64_t r = u / kernel_, s = u % kernel_;
      return x6(all, all, slice(r, r + 1), all, slice(s, s + 1), all);
    };
    std::optional<Expr> top;
    if (output_.defined()) {
      top = Expr(output_.reshape(window));
    } else {
      for (std::int64_t u = 0; u < kernel_ * kernel_; ++u)
        top = top ? maximum(*top, Expr(tap6(u))) : Expr(tap6(u));
    }
    if (!tap_order_.defined() || tap_order_.device() != device || tap_order_.dim(2) != kernel_) {
      std::vector<float> order(static_cast<std::size_t>(kernel_ * kernel_));
      for (std::size_t u = 0; u < order.size(); ++u) order[u] = static_cast<float>(u);
      tap_order_ = Array::from_floats(order, {1, 1, kernel_, 1, kernel_, 1}, DType::f32, device);
    }
    const Expr order(tap_order_);
    Expr first = eq(x6, *top);
    for (std::int64_t u = 0; u + 1 < kernel_ * kernel_; ++u)  // an earlier tap holding it
      first = first * (Expr(1.0) - eq(tap6(u), *top) * lt(static_cast<double>(u), order));
    value = where(first, g6, 0.0);
  }
  Array grad = flex() ? new_tensor("input gradient", xs, device, TensorClass::gradients)
                      : Array::empty(xs, DType::f32, device);
  assign(grad.reshape(six), value, flex() ? writes() : AssignOptions{});
  return grad;
}

// Any other geometry: tap by tap into an f32 scratch, then stored once (a flex16 gradient's
// manager sees one write per step).
Array Pool2d::backward_by_taps(const Array& g4) {
  const Shape& os = output_shape_;
  Array grad_x = Array::zeros(input_.shape(), DType::f32, g4.device());
  const bool overlapping = stride_ < kernel_;
  std::vector<Array> taps;
  for (std::int64_t r = 0; r < kernel_; ++r)
    for (std::int64_t s = 0; s < kernel_; ++s) {
      Array gx = tap(grad_x, r, s, stride_, os[1], os[2]);
      Expr contribution(0.0);
      if (mode_ == Mode::average) {
        contribution = Expr(g4) * (1.0 / static_cast<double>(kernel_ * kernel_));
      } else {
        // The gradient goes to the first tap holding the maximum, as PyTorch's does.
        const Array xt = tap(input_, r, s, stride_, os[1], os[2]);
        Expr top = output_.defined() ? Expr(output_) : max_of_taps(input_, os);
        Expr first = eq(xt, top);
        for (const Array& earlier : taps) first = first * ne(earlier, top);
        contribution = where(first, g4, 0.0);
        taps.push_back(xt);
      }
      if (overlapping)
        gx += contribution;
      else
        assign(gx, contribution);
    }
  if (!flex()) return grad_x;
  Array stored =
      new_tensor("input gradient", grad_x.shape(), grad_x.device(), TensorClass::gradients);
  assign(stored, Expr(grad_x), writes());
  return stored;
}

Array Pool2d::backward(const Array& grad_output) {
  if (!input_.defined()) throw ValueError(cat(describe(), ": backward without a training forward"));
  const Shape& os = output_shape_;
  const Array g4 = grad_output.contiguous().reshape(os);
  const bool tiled =
      stride_ == kernel_ && input_.dim(1) == os[1] * kernel_ && input_.dim(2) == os[2] * kernel_;
  const Array grad_x = tiled ? backward_tiled(g4) : backward_by_taps(g4);
  Shape in_shape = input_.shape();
  const std::int64_t merged = in_shape.back();
  in_shape.pop_back();
  drop_saved();
  const std::int64_t batch = grad_output.dim(grad_output.rank() - 1);
  return grad_x.reshape(with_time_batch(in_shape, merged / batch, batch));
}

std::optional<PooledGradient> Pool2d::pooled_gradient(const Array& grad_output) {
  if (!input_.defined() || mode_ != Mode::max || stride_ != kernel_ ||
      kernel_ > PooledGradient::kMaxKernel || input_.dtype() != DType::u8 ||
      grad_output.rank() != 5)
    return std::nullopt;
  const Shape& os = output_shape_;
  const std::int64_t steps = grad_output.dim(3), batch = grad_output.dim(4);
  if (input_.dim(1) != os[1] * kernel_ || input_.dim(2) != os[2] * kernel_ ||
      steps * batch != os[3] || grad_output.dim(0) != os[0] || grad_output.dim(1) != os[1] ||
      grad_output.dim(2) != os[2])
    return std::nullopt;
  PooledGradient pooled;
  pooled.gradient = grad_output.contiguous();
  pooled.source = input_.reshape({input_.dim(0), input_.dim(1), input_.dim(2), steps, batch});
  pooled.kernel = kernel_;
  drop_saved();
  return pooled;
}

void Pool2d::drop_saved() {
  input_ = Array();
  output_ = Array();
}

JsonValue Pool2d::config() const {
  return JsonValue::object({{"type", mode_ == Mode::max ? "maxpool2d" : "avgpool2d"},
                            {"kernel_size", kernel_},
                            {"stride", stride_},
                            {"padding", 0}});
}

Shape Flatten::output_features(const Shape& input) const {
  return {shape_numel(input)};
}

Array Flatten::forward(const Array& x) {
  const ActivationShape a = split_activation(x, describe());
  input_shape_ = x.shape();
  return x.contiguous().reshape({shape_numel(a.features), a.steps, a.batch});
}

Array Flatten::backward(const Array& grad_output) {
  return grad_output.contiguous().reshape(input_shape_);
}

JsonValue Flatten::config() const {
  return JsonValue::object({{"type", "flatten"}, {"order", "(C, H, W) row-major, as PyTorch"}});
}

}  // namespace flexkit::nn
