// Seeded uniform f32 test data on the test's device.
#pragma once
#include <random>
#include <vector>

#include "flexkit/array.hpp"
#include "support/test_device.hpp"

namespace flexkit::test {

// Values drawn uniformly from [lo, hi) (std::mt19937 seeded with `seed`), row-major.
inline Array uniform_array(const Shape& shape, unsigned seed, float lo, float hi) {
  std::vector<float> v(static_cast<std::size_t>(shape_numel(shape)));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  for (float& x : v) x = u(rng);
  return Array::from_floats(v, shape, DType::f32, device());
}

}  // namespace flexkit::test
