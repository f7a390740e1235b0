// Integer test data for the exact products: seeded random mantissas or bytes, and the flex16 and
// u8 arrays that hold them (row-major).
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "flexkit/array.hpp"
#include "support/test_device.hpp"

namespace flexkit::test {

using Ints = std::vector<std::int64_t>;

inline Ints random_ints(std::int64_t count, std::int64_t lo, std::int64_t hi, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int64_t> u(lo, hi);
  Ints v(static_cast<std::size_t>(count));
  for (auto& x : v) x = u(rng);
  return v;
}

// Mantissas at `iwl`.
inline Array flex_array(const Ints& v, int iwl, const Shape& shape, Device on = device()) {
  std::vector<std::int16_t> m(v.begin(), v.end());
  return Array::from_flex16(m, iwl, shape, on);
}

inline Array u8_array(const Ints& v, const Shape& shape, Device on = device()) {
  std::vector<std::uint8_t> b(v.begin(), v.end());
  return Array::from_vector(b, shape, on);
}

}  // namespace flexkit::test
