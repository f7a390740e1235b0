// A checked neuron lowered onto one step: an SSA program over the step's inputs (seq_in slot i
// = input i), the previous states (carried slot k = state k) and the run-time parameters (param
// slot p). Fixed parameters are compiled in as constants, so flags such as decay_input fold
// away and each variant gets the program it would have had written out by hand.
#pragma once
#include <string>
#include <vector>

#include "ir/step_kernel.hpp"
#include "snn/neuron_ast.hpp"

namespace flexkit::snn {

struct LoweredStep {
  StepProgram body;  // may contain detach; kernels strip it after differentiation
  std::size_t num_inputs = 0;
  std::vector<int> outputs;     // value of each output
  std::vector<int> new_states;  // value of each state after the step
  std::vector<ParamSlot> runtime_params;
  std::vector<int> runtime_param_of;     // per spec param: its slot, or -1 when fixed
  std::vector<bool> learnable;           // per runtime param slot
  std::vector<std::string> value_names;  // per value: the body name first bound to it, or ""
};

LoweredStep lower_neuron(const NeuronSpec& spec);

// A state's value before the first step (its init expression, else 0), in double.
double state_initial_value(const NeuronSpec& spec, std::size_t state);

}  // namespace flexkit::snn
