// Seeded uniform f32 test data on the test's device.
#pragma once
#include <random>
#include <vector>

#include "flexkit/array.hpp"
#include "support/test_device.hpp"

namespace flexkit::test {

// n values drawn uniformly from [lo, hi) (std::mt19937 seeded with `seed`).
inline std::vector<float> uniform_values(std::size_t n, unsigned seed, float lo, float hi) {
  std::vector<float> v(n);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  for (float& x : v) x = u(rng);
  return v;
}

// The same as an f32 array of `shape` on the test's device, row-major.
inline Array uniform_array(const Shape& shape, unsigned seed, float lo, float hi) {
  return Array::from_floats(
      uniform_values(static_cast<std::size_t>(shape_numel(shape)), seed, lo, hi), shape, DType::f32,
      device());
}

}  // namespace flexkit::test
