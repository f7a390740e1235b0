// An integer product's exact sums before its one rounding, for a product whose inner dimension
// is split over processes (data-parallel flex16 training: each process holds its part of the
// batch, which is the inner dimension of a weight gradient). Each process takes the sums of its
// part, the parts are added as integers (exact, so any order gives the same total), and
// store_exact_sums rounds the total exactly as dot() rounds the whole product: the same output,
// bit for bit, for any number of parts.
#pragma once
#include <cstdint>
#include <vector>

#include "flexkit/array.hpp"
#include "flexkit/heavy_op_options.hpp"

namespace flexkit::gemm {

struct ExactSums {
  std::int64_t m = 0, n = 0;
  // operand_iwl(A) + operand_iwl(B): a sum's unit is 2^(iwl_ab − 30). Parts added together must
  // share it (their operands' exponents agree).
  int iwl_ab = 0;
  std::vector<std::int64_t> values;  // row-major m × n
};

// The sums of a · b for a (m, k) and b (k, n) of an integer product's types (flex16 × flex16,
// flex16 × u8, u8 × flex16), any strides. They are taken by the CPU's kernels; operands on a
// GPU are copied to the host first. Throws as dot() does for bad operands.
ExactSums exact_sums(const Array& a, const Array& b);

// dot(a, b, out, options) finished from the sums of a · b (or the integer total of several
// parts' sums): out (m, n), flex16 or f32, rounded once under the options' alpha, beta and iwl
// policy (an Autoflex manager records the write as it records dot's).
void store_exact_sums(const ExactSums& sums, const Array& out, const HeavyOpOptions& options);

}  // namespace flexkit::gemm
