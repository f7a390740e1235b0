// The surrogate gradients a FlexSN spike can take: named in the language's syntax tree and carried
// by the step programs' spike_grad instructions (the portable op math numbers them the same way).
#pragma once
#include <cstdint>
#include <string_view>

namespace flexkit::ir {

enum class Surrogate : std::uint8_t {
  kSigmoid,
  kAtan,
  kPiecewiseQuadratic,
  kPiecewiseExp,
  kSoftSign,
  kSuperSpike,
  kErf,
};

// The language's spelling ("sigmoid", "atan", ...), which kernel listings use too. Inline, so the
// parser's fuzzer, built from the language's sources alone, has it.
inline std::string_view surrogate_name(Surrogate s) {
  switch (s) {
    case Surrogate::kSigmoid:
      return "sigmoid";
    case Surrogate::kAtan:
      return "atan";
    case Surrogate::kPiecewiseQuadratic:
      return "piecewise_quadratic";
    case Surrogate::kPiecewiseExp:
      return "piecewise_exp";
    case Surrogate::kSoftSign:
      return "soft_sign";
    case Surrogate::kSuperSpike:
      return "super_spike";
    case Surrogate::kErf:
      return "erf";
  }
  return "?";
}

}  // namespace flexkit::ir

// The neuron language names them unqualified.
namespace flexkit::snn {
using ir::Surrogate;
using ir::surrogate_name;
}  // namespace flexkit::snn
