// Reverse-mode differentiation of a lowered step and the plan of what the forward keeps for it.
//
// The backward kernel runs the steps T-1 -> 0. At step t it knows the gradients flowing into the
// step's outputs and new states and produces those of its inputs, previous states and
// parameters. It needs some forward values of step t; the residual plan picks the fewest values
// to store per neuron-step from which all of them can be recomputed (a minimum vertex cut between
// the step's inputs/previous states and the values the derivative reads). For LIF that is one
// value, the charged potential h, as in hand-written kernels.
#pragma once
#include <functional>
#include <vector>

#include "snn/neuron_lowering.hpp"
#include "snn/step_builder.hpp"

namespace flexkit::snn {

struct AdjointSeeds {
  std::vector<int> outputs;     // per output: its gradient's value in the target program, or -1
  std::vector<int> new_states;  // per state: likewise
};

struct AdjointResult {
  std::vector<int> inputs;      // per input: gradient value, -1 for zero
  std::vector<int> old_states;  // per state
  std::vector<int> params;      // per runtime param slot (learnable ones only; else -1)
};

// Emits the derivative of `step` into `out`. forward_value(id) gives the value in `out` of forward
// value `id` (a copy, a recomputation or a loaded residual).
AdjointResult emit_adjoint(const LoweredStep& step, StepBuilder& out,
                           const std::function<int(int)>& forward_value, const AdjointSeeds& seeds);

// Forward value ids the backward stores per neuron-step, in increasing order. With inputs_kept
// the backward reads the inputs from the caller's arrays, so they cost nothing and are never
// stored.
std::vector<int> plan_residuals(const LoweredStep& step, bool inputs_kept);

}  // namespace flexkit::snn
