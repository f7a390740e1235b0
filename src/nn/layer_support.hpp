// Helpers shared by the layer implementations.
#pragma once
#include <string>

#include "core/text.hpp"
#include "flexkit/array.hpp"
#include "flexkit/error.hpp"
#include "flexkit/nn.hpp"

namespace flexkit::nn::detail {

using flexkit::detail::cat;

// The activation's (*features, T, N) split: features, and the merged batch T·N.
struct ActivationShape {
  Shape features;
  std::int64_t steps = 1, batch = 0;
  std::int64_t merged() const { return steps * batch; }
};
ActivationShape split_activation(const Array& x, const std::string& layer);
Shape with_time_batch(const Shape& features, std::int64_t steps, std::int64_t batch);

// A zero-filled f32 gradient for a parameter.
void ensure_grad(Parameter& p);
Parameter make_parameter(std::string name, const Shape& shape, bool trainable = true);
void move_parameter(Parameter& p, Device device);
void require_f32(const LayerOptions& options, const std::string& layer);
std::string shape_json(const Shape& s);
std::string bool_text(bool b);

}  // namespace flexkit::nn::detail
