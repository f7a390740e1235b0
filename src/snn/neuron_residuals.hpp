// What a training forward hands to its backward.
#pragma once
#include <memory>
#include <vector>

#include "flexkit/neuron.hpp"
#include "snn/neuron_compiled.hpp"

namespace flexkit {

struct NeuronResiduals {
  std::shared_ptr<const snn::NeuronCompiled>
      neuron;  // the neuron (and bound values) that made them
  Shape neuron_shape;
  std::int64_t steps = 0;
  int time_axis = 0;  // where T sits in the forward's sequences (and so in values)
  Device device = Device::cpu();
  DType residual_dtype = DType::f32;
  bool steady_inputs = false;  // NeuronStorage::repeat_steps: kept inputs have one step
  // No residual was stored: the backward replays them (snn::replay_residuals).
  bool replayed = false;
  // per planned residual (none when replayed), then (inputs_kept) the kernel inputs: the
  // inputs' full shape
  std::vector<Array> values;
  std::vector<Array> params;  // per run-time parameter: the f32 values the forward read
};

}  // namespace flexkit
