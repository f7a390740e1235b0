// Host-side flex16 codec: choose an exponent from data, encode with round-half-even (or seeded
// stochastic rounding) and saturation, decode exactly (docs/flex16.md).
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "flexkit/portable/flex16_codec.hpp"

namespace flexkit {

using portable::Flex16Stats;
using portable::kFlex16MaxIwl;
using portable::kFlex16MinIwl;

enum class Rounding { nearest_even, stochastic };

struct Flex16EncodeOptions {
  // Exponent to encode at; empty = choose from the data (floor(log2(max|x|)) + 1, 0 if all zero).
  std::optional<int> iwl;
  Rounding rounding = Rounding::nearest_even;
  std::uint64_t seed = 0;  // for Rounding::stochastic; element i uses (seed, i)
};

// The result of encoding a host buffer: mantissas, the exponent used and what the encode saw.
struct Flex16Encoded {
  std::vector<std::int16_t> m;
  int iwl = 0;
  Flex16Stats stats{};
};

// floor(log2(max|x|)) + 1 over the data (0 for all zeros); ValueError on NaN or infinity.
int flex16_choose_iwl(std::span<const float> x);
int flex16_choose_iwl(std::span<const double> x);

// Encode host values. Throws ValueError (naming the first offending index) if any value is NaN
// or infinite — nothing is encoded in that case. Saturation is counted, not an error.
Flex16Encoded flex16_encode(std::span<const float> x, const Flex16EncodeOptions& options = {});
Flex16Encoded flex16_encode(std::span<const double> x, const Flex16EncodeOptions& options = {});

std::vector<float> flex16_decode(std::span<const std::int16_t> m, int iwl);

// Throws ValueError unless kFlex16MinIwl <= iwl <= kFlex16MaxIwl.
void check_iwl(int iwl, const char* operation);

}  // namespace flexkit
