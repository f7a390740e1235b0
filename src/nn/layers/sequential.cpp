#include "nn/layer_support.hpp"

namespace flexkit::nn {

using namespace detail;

void Sequential::add(std::unique_ptr<Layer> layer) {
  if (!layer) throw ValueError("Sequential::add: a null layer");
  layers_.push_back(std::move(layer));
}

Array Sequential::forward(const Array& x) {
  Array h = x;
  for (auto& layer : layers_) h = layer->forward(h);
  return h;
}

Array Sequential::backward(const Array& grad_output) {
  Array g = grad_output;
  for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) g = (*it)->backward(g);
  return g;
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
        if (p->grad.defined() && p->grad.shape() == p->value.shape() &&
            p->grad.device() == p->value.device())
          p->grad.fill(0.0);
        else
          ensure_grad(*p);
      }
}

void Sequential::reset_parameters(Rng& rng) {
  for (auto& layer : layers_) layer->reset_parameters(rng);
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
