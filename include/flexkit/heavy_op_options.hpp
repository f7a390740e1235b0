// The options of the heavy products, dot() and the convolutions: both scale an exact product into
// their output the same way, so they take one struct (DotOptions and ConvOptions name it).
#pragma once
#include <optional>

#include "flexkit/expr.hpp"

namespace flexkit {

// out = alpha · product + beta · out.
struct HeavyOpOptions {
  double alpha = 1.0;
  double beta = 0.0;  // 0: the output is overwritten (never read); otherwise accumulated into
  // flex16 outputs: `fixed` keeps the output's iwl (or sets `iwl` first); `exact` measures the
  // result first (a second pass over the product) and picks the smallest iwl that holds it.
  IwlPolicy iwl_policy = IwlPolicy::fixed;
  std::optional<int> iwl;
};

using DotOptions = HeavyOpOptions;
using ConvOptions = HeavyOpOptions;

}  // namespace flexkit
