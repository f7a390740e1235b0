// A neuron after every compile step that does not depend on a call: the checked spec, its
// lowered step, the residual plan and the states' initial values. Kernels for a call are
// assembled from it (cheap: a few hundred instructions at most).
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "flexkit/neuron.hpp"
#include "ir/step_kernel.hpp"
#include "snn/neuron_ast.hpp"
#include "snn/neuron_lowering.hpp"

namespace flexkit::snn {

struct NeuronCompiled {
  NeuronCompiled() = default;
  NeuronCompiled(const NeuronCompiled&) = delete;
  NeuronCompiled& operator=(const NeuronCompiled&) = delete;

  NeuronSpec spec;
  LoweredStep step;
  std::vector<int> residuals;          // forward value ids stored per neuron-step
  std::vector<double> initial_values;  // per state
  std::vector<bool> output_is_spike;   // per output: its value is spike(...), 0 or 1
  // The backward reads the inputs from the caller's arrays (kept by reference in the residuals,
  // after the stored values) instead of a stored copy: the residual plan counts them as free.
  bool inputs_kept = false;

  // Kernels assembled for earlier calls, by configuration: a repeated call costs a lookup, not
  // differentiation and listing (tens of microseconds, a tenth of a LIF step kernel's run).
  mutable std::mutex kernels_mutex;
  mutable std::map<std::string, std::shared_ptr<const StepKernel>> kernels;
  mutable std::shared_ptr<const NeuronCompiled> channel_affine;  // made on first use
};

std::shared_ptr<const NeuronCompiled> compile_neuron(NeuronSpec spec);

// The neuron with its one input first mapped per channel, x' = (x - bn_center) * bn_scale +
// bn_shift (per_channel runtime params, the last three; bn_scale and bn_shift learnable): a
// BatchNorm folded into the neuron that follows it, so the normalised values are never stored.
// The gradients of bn_scale and bn_shift are the per-channel sums BatchNorm's backward needs,
// sum(grad x' * (x - center)) and sum(grad x'). Its inputs are kept, not stored. Memoised in
// `neuron`.
std::shared_ptr<const NeuronCompiled> channel_affine_neuron(const NeuronCompiled& neuron);

// Forward kinds. Slots: seq_in = the inputs; seq_out = the outputs, then (with state sequences)
// the states, then (training) the residuals; carried = the states; params = the run-time params.
struct ForwardKernelConfig {
  NeuronKernelKind kind = NeuronKernelKind::inference;
  std::vector<DType> input_dtypes;
  NeuronStorage storage;
  // training_forward of a neuron whose inputs are kept: no residuals are stored, the backward
  // replays the steps (see replay_residuals).
  bool residuals_replayed = false;
};
bool writes_state_sequences(const ForwardKernelConfig& config);
StepKernel make_forward_kernel(const NeuronCompiled& neuron, const ForwardKernelConfig& config);
// The same, memoised in `neuron` with its structure filled in.
std::shared_ptr<const StepKernel> forward_kernel(const NeuronCompiled& neuron,
                                                 const ForwardKernelConfig& config);

// Backward. Slots: seq_in = the residuals, then (inputs_kept) the inputs, then the given output
// gradients, then the given
// state-sequence gradients (each in neuron order); seq_out = the input gradients (f32);
// carried = the state gradients, then (steady_inputs) the inputs' gradients summed over the
// steps, then one accumulator per learnable parameter.
struct BackwardKernelConfig {
  DType residual_dtype = DType::f32;
  std::vector<DType> kept_inputs;  // inputs_kept: each input's dtype (their slots follow the
                                   // residuals')
  // The forward read steady inputs (NeuronStorage::repeat_steps): their gradients are carried
  // sums over the steps (after the learnable parameters' accumulators), not sequences.
  bool steady_inputs = false;
  std::vector<std::optional<DType>> grad_outputs;  // per output; nullopt = zero
  // Per output (empty = none): k where its gradient is a k x k max pool's output gradient,
  // routed in the kernel (SequenceSlot::pool), else 0.
  std::vector<int> grad_output_pools;
  std::vector<std::optional<DType>> grad_state_seqs;  // per state; nullopt = zero
  // The residual slots are replayed (StepKernel::replay): recomputed from the kept inputs by
  // running the steps forward from the states' initial values, not loaded.
  bool replayed = false;
};

// Whether a training forward of `neuron` over `steps` stores no residuals and its backward
// replays them: the inputs are kept (the backward reads them anyway), the states start from
// their initial values (no initial-state arrays given) and T fits a replay. Replayed values are
// the very floats a stored f32 residual holds, so the gradients are the same bits either way;
// the forward writes, and the backward reads, T values per neuron and residual fewer.
bool replay_residuals(const NeuronCompiled& neuron, std::int64_t steps, bool initial_states_given);
StepKernel make_backward_kernel(const NeuronCompiled& neuron, const BackwardKernelConfig& config);
std::shared_ptr<const StepKernel> backward_kernel(const NeuronCompiled& neuron,
                                                  const BackwardKernelConfig& config);

// The learnable runtime param slots, in order (their accumulators follow the state gradients).
std::vector<int> learnable_param_slots(const NeuronCompiled& neuron);

// Listing of the forward step and the derived backward step, for introspection.
std::string describe_forward(const NeuronCompiled& neuron);
std::string describe_backward(const NeuronCompiled& neuron);
std::string residual_name(const NeuronCompiled& neuron, int value);

}  // namespace flexkit::snn
