#include "nn/layer_support.hpp"

namespace flexkit::nn {

using namespace detail;

void Sequential::add(std::unique_ptr<Layer> layer) {
  if (!layer) throw ValueError("Sequential::add: a null layer");
  layers_.push_back(std::move(layer));
}

namespace {

// A float tensor stored as flex16 under `manager` (u8 and flex16 pass through).
Array as_flex16(const Array& x, const Autoflex& manager) {
  if (x.dtype() == DType::flex16 || x.dtype() == DType::u8) return x;
  Array out = Array::empty(x.shape(), DType::flex16, x.device());
  out.set_autoflex(manager);
  assign(out, Expr(x), {.iwl_policy = IwlPolicy::autoflex});
  return out;
}

}  // namespace

// The spiking layer a training BatchNorm at `i` folds into, for input x, or null.
Spiking* Sequential::fold_target(std::size_t i, const Array& x) {
  auto* bn = dynamic_cast<BatchNorm*>(layers_[i].get());
  if (!bn || !bn->training() || i + 1 >= layers_.size() || !x.defined()) return nullptr;
  auto* sn = dynamic_cast<Spiking*>(layers_[i + 1].get());
  if (!sn || !sn->training() || x.rank() < 3) return nullptr;
  const std::int64_t steps = x.dim(x.rank() - 2);
  if (steps != sn->time_steps() && steps != 1) return nullptr;  // the layer's shape error then
  return sn;
}

Array Sequential::forward(const Array& x) {
  Array h = precision_.dtype == DType::flex16 && x.defined() ? as_flex16(x, input_manager_) : x;
  folded_.assign(layers_.size(), 0);
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    if (Spiking* sn = fold_target(i, h)) {
      const BatchNorm::Fold fold = static_cast<BatchNorm&>(*layers_[i]).fold_forward(h);
      h = sn->forward_folded(h, fold);
      folded_[i] = 1;
      ++i;
      continue;
    }
    h = layers_[i]->forward(h);
  }
  return h;
}

Array Sequential::backward(const Array& grad_output,
                           const std::function<void(std::size_t)>& layer_done) {
  Array g = precision_.dtype == DType::flex16 && grad_output.defined()
                ? as_flex16(grad_output, loss_gradient_manager_)
                : grad_output;
  // Layers up to the first one with a trainable parameter need no input gradient unless the
  // caller asks for the network's.
  std::size_t first_trainable = layers_.size();
  for (std::size_t i = 0; i < layers_.size() && first_trainable == layers_.size(); ++i)
    for (const Parameter* p : layers_[i]->parameters())
      if (p->trainable) first_trainable = i;
  for (std::size_t i = 0; i < layers_.size(); ++i)
    layers_[i]->set_input_gradient(input_gradient_ || i > first_trainable);
  for (std::size_t i = layers_.size(); i-- > 0;) {
    if (!g.defined() && !input_gradient_) {  // nothing below needs a gradient
      layers_[i]->drop_saved();
      if (i < folded_.size()) folded_[i] = 0;
      if (layer_done) layer_done(i);
      continue;
    }
    // A max pool after a spiking layer hands its gradient to the neuron's backward, which
    // routes it (the spiking layer's output gradient is never stored).
    std::optional<PooledGradient> pooled;
    if (auto* pool = dynamic_cast<Pool2d*>(layers_[i].get());
        pool && i > 0 && dynamic_cast<Spiking*>(layers_[i - 1].get()) &&
        layers_[i - 1]->training()) {
      pooled = pool->pooled_gradient(g);
      if (pooled) {
        if (layer_done) layer_done(i);
        --i;
      }
    }
    auto* sn = dynamic_cast<Spiking*>(layers_[i].get());
    if (i > 0 && i - 1 < folded_.size() && folded_[i - 1]) {
      g = pooled ? sn->backward_through_pool(*pooled) : sn->backward(g);
      pooled.reset();  // the spikes and the pooled gradient, free before the BatchNorm's backward
      const Spiking::FoldGradients& sums = sn->fold_gradients();
      g = static_cast<BatchNorm&>(*layers_[i - 1]).fold_backward(g, sums.sum_centered, sums.sum);
      folded_[i - 1] = 0;
      if (layer_done) {
        layer_done(i);
        layer_done(i - 1);
      }
      --i;
      continue;
    }
    g = pooled ? sn->backward_through_pool(*pooled) : layers_[i]->backward(g);
    if (layer_done) layer_done(i);
  }
  return g;
}

void Sequential::set_precision(const Precision& precision) {
  for (auto& layer : layers_) layer->set_precision(precision);
  precision_ = precision;
  input_manager_ = Autoflex();
  loss_gradient_manager_ = Autoflex();
}

std::vector<ManagedTensor> Sequential::managed_tensors() {
  std::vector<ManagedTensor> out;
  if (precision_.dtype != DType::flex16) return out;
  out.push_back({"input", TensorClass::activations, input_manager_});
  out.push_back({"loss gradient", TensorClass::gradients, loss_gradient_manager_});
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const std::string prefix = cat(i, ".", layers_[i]->kind(), ".");
    for (const Parameter* p : layers_[i]->parameters()) {
      if (!p->trainable) continue;
      if (p->value.dtype() == DType::flex16)
        out.push_back({prefix + p->name, TensorClass::weights, p->value.autoflex()});
      if (p->grad.defined() && p->grad.dtype() == DType::flex16)
        out.push_back({prefix + p->name + ".grad", TensorClass::gradients, p->grad.autoflex()});
    }
    for (ManagedTensor m : layers_[i]->managed_tensors()) {
      m.name = prefix + m.name;
      out.push_back(std::move(m));
    }
  }
  return out;
}

Autoflex Sequential::manager(const std::string& name, TensorClass tensor_class) {
  if (name == "input") return input_manager_;
  if (name == "loss gradient") return loss_gradient_manager_;
  // "<index>.<kind>.<role or parameter>[.grad]", as managed_tensors() names them.
  const std::size_t dot = name.find('.');
  std::size_t index = layers_.size();
  try {
    index = std::stoul(name.substr(0, dot));
  } catch (const std::exception&) {
  }
  if (dot == std::string::npos || index >= layers_.size())
    throw ValueError(cat("no flex16 tensor named '", name, "' in this network"));
  Layer& layer = *layers_[index];
  const std::string prefix = cat(index, ".", layer.kind(), ".");
  if (name.compare(0, prefix.size(), prefix) != 0)
    throw ValueError(cat("no flex16 tensor named '", name, "' in this network (layer ", index,
                         " is ", layer.kind(), ")"));
  const std::string role = name.substr(prefix.size());
  for (Parameter* p : layer.parameters()) {
    if (!p->trainable || p->value.dtype() != DType::flex16) continue;
    if (role == p->name) return p->value.autoflex();
    if (role == p->name + ".grad") {
      ensure_grad(*p);
      return p->grad.autoflex();
    }
  }
  return layer.manager(role, tensor_class);
}

void Sequential::set_training(bool training) {
  for (auto& layer : layers_) layer->set_training(training);
}

void Sequential::to(Device device) {
  for (auto& layer : layers_) layer->to(device);
}

void Sequential::zero_grad() {
  for (auto& layer : layers_)
    for (Parameter* p : layer->parameters())
      if (p->trainable) {
        p->grad_sums.reset();
        if (p->grad.defined() && p->grad.shape() == p->value.shape() &&
            p->grad.device() == p->value.device()) {
          p->grad.fill(0.0);
          p->grad_zeroed = true;
        } else {
          ensure_grad(*p);
        }
      }
}

void Sequential::reset_parameters(Rng& rng) {
  for (auto& layer : layers_) {
    layer->reset_parameters(rng);  // f32 values, then stored as the layer's precision says
    layer->set_precision(layer->precision());
  }
}

std::vector<std::pair<std::string, Parameter*>> Sequential::named_parameters() {
  std::vector<std::pair<std::string, Parameter*>> out;
  for (std::size_t i = 0; i < layers_.size(); ++i)
    for (Parameter* p : layers_[i]->parameters()) out.emplace_back(cat(i, ".", p->name), p);
  return out;
}

std::vector<Parameter*> Sequential::parameters() {
  std::vector<Parameter*> out;
  for (auto& layer : layers_)
    for (Parameter* p : layer->parameters())
      if (p->trainable) out.push_back(p);
  return out;
}

Shape Sequential::check_shapes(const Shape& input) const {
  Shape s = input;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    try {
      s = layers_[i]->output_features(s);
    } catch (const ShapeError& e) {
      throw ShapeError(cat("layer ", i, " (", layers_[i]->describe(), "): ", e.what()));
    }
  }
  return s;
}

}  // namespace flexkit::nn
