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

// A zero-filled gradient for a parameter, of its value's dtype.
void ensure_grad(Parameter& p);
// The parameter stored as `precision` says (its gradient dropped; see Layer::set_precision).
void convert_parameter(Parameter& p, const Precision& precision);
// A copy on `device` that keeps a flex16 array's exponent manager.
Array copy_keeping_manager(const Array& a, Device device);
Parameter make_parameter(std::string name, const Shape& shape, bool trainable = true);
void move_parameter(Parameter& p, Device device);
std::string shape_json(const Shape& s);
std::string bool_text(bool b);

}  // namespace flexkit::nn::detail
