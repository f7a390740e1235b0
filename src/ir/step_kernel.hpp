// The form every FlexSN kernel kind is lowered to before a backend runs it: a per-neuron loop
// over T steps whose body is a flat SSA program of float32 scalar ops of the one IR (ir/op.hpp).
// The CPU interpreter (backend/cpu/step_kernel_executor.cpp) and the CUDA generator
// (codegen/cuda_step_kernel_source.cpp) read this one description, so both backends compute the
// same thing in the same order. The names stay in namespace snn: FlexSN is the language that
// lowers to this form, and its code names them unqualified.
//
// Per neuron n (N neurons, T steps, sequences laid out [outer, T, inner] contiguous, with
// N = outer * inner and n = o * inner + i; inner = N is the plain [T, N]):
//
//   at(t, n) = o * T * inner + t * inner + i
//   carried[k] = carried_init[k] ? carried_init[k][n] : carried[k].init_value
//   for step in 0..T-1:  t = reverse ? T-1-step : step
//     value of a seq_in leaf i = load(seq_in[i][steady ? n : at(t, n)])  (converted to float)
//     value of a carried leaf k = carried[k]
//     value of a param leaf p  = params[p][per_neuron ? n : per_channel ? n / channel_neurons : 0]
//     run body; seq_out[j][at(t, n)] = store(value seq_out_value[j])
//     carried[k] = value carried_next[k]
//   carried_final[k][n] = carried[k]   (where a final array is given)
//
// A reverse kernel may carry a replay: before its steps it runs the replay program forward over
// t = 0..T-1 (the replay's own carried values starting at their init values) and keeps, per
// neuron and step, the values its seq_in slots marked `replayed` read at step t. Those slots take
// no array: values a training forward would otherwise store are recomputed from the inputs.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "flexkit/array.hpp"
#include "ir/op.hpp"

namespace flexkit::snn {

// The body of one step: instructions of the one IR (ir/op.hpp) using the step leaves (constant,
// seq_in, carried, param), elementwise ops and spike/spike_grad; detach only before
// differentiation.
struct StepProgram {
  std::vector<ir::Instr> instrs;
};

// Storage dtypes of sequences: f32, bf16, flex16 or u8 (u8 stores saturate and truncate, as
// expression stores do). flex16 slots take their exponent from the array at run time and record
// statistics into it.
struct SequenceSlot {
  std::string name;  // for generated code comments, errors and introspection
  DType dtype = DType::f32;
  // seq_in only: one value per neuron, [outer, 1, inner], read at every step (a constant input
  // current), loaded once.
  bool steady = false;
  // seq_in only, in a kernel with a replay: the value at step t is the replay's, not loaded.
  bool replayed = false;
  // seq_in only, at most one slot of a kernel: the gradient of a pool x pool max pool (stride
  // pool) applied to the neurons' output, routed to each neuron as the pool's backward would (see
  // StepKernelLaunch::pool_source); 0 = a plain sequence.
  int pool = 0;
};

// The largest window of a pooled gradient slot (its taps are held in registers).
inline constexpr int kMaxPool = 4;

struct CarriedSlot {
  std::string name;
  float init_value = 0;  // used where no initial array is given
  // Its final array holds one value per group of StepKernelLaunch::final_group consecutive
  // neurons: the group's final values summed as a balanced binary tree in neuron order,
  // ((v0 + v1) + (v2 + v3)) + ... (a parameter's gradient partials, N / final_group of them
  // instead of N).
  bool summed_in_groups = false;
};

// The group size of summed_in_groups slots a launch may take besides 1: a warp of neurons.
inline constexpr std::int64_t kFinalGroup = 32;

struct ParamSlot {
  std::string name;
  bool per_neuron = false;  // else one value for every neuron
  // One value per channel: per block of launch.channel_neurons consecutive neurons (the neurons of
  // a network's (C, H, W, T, N) activations are channel-major), e.g. a BatchNorm's affine.
  bool per_channel = false;
};

// The forward steps a reverse kernel recomputes first (see the top of this file).
struct StepReplay {
  // Leaves: constants, the kernel's params, its seq_in slots that are not replayed, and the
  // replay's own carried values.
  StepProgram body;
  std::vector<CarriedSlot> carried;  // start at init_value (part of the kernel's identity)
  std::vector<int> carried_next;
  std::vector<int> values;  // per replayed seq_in slot, in slot order: the value it reads
};

// The most steps a replay keeps per neuron (the CUDA kernel holds them in a per-thread array).
inline constexpr std::int64_t kMaxReplaySteps = 16;

struct StepKernel {
  std::string name;  // e.g. "lif_training_forward"; a C identifier
  bool reverse = false;
  std::vector<SequenceSlot> seq_in;
  std::vector<SequenceSlot> seq_out;
  std::vector<int> seq_out_value;  // value id stored to each seq_out slot
  std::vector<CarriedSlot> carried;
  std::vector<int> carried_next;  // value id each carried value takes after a step
  std::vector<ParamSlot> params;
  StepProgram body;
  std::optional<StepReplay> replay;  // reverse kernels only
  // step_kernel_structure of this kernel when the kernel was memoised with it (the backends'
  // cache key); empty = compute it on use.
  std::string structure;
};

// Readable listing, one instruction per line ("%3 = mul %1, %2"); also the structural identity
// of a kernel (two kernels with equal listings compute the same thing).
std::string to_string(const StepKernel& kernel);

// to_string(kernel) without the carried slots' initial values (those are launch parameters):
// everything a generated program depends on, hence the kernel cache key.
std::string step_kernel_structure(const StepKernel& kernel);

// The arrays of one launch. All on one device; sequences are contiguous [outer, T, inner] (any
// shape with T * N elements in that order), in their slot's dtype; carried and params are
// contiguous f32, indexed by n. An empty (default-constructed) carried_init / carried_final
// entry means "use init_value" / "do not store".
struct StepKernelLaunch {
  std::int64_t neurons = 0;
  std::int64_t steps = 0;
  // Neurons between two steps of one neuron's sequence (a divisor of neurons); 0 means neurons,
  // the layout [T, N].
  std::int64_t inner = 0;
  // Neurons per channel of per_channel params (a divisor of neurons); 0 when there are none.
  std::int64_t channel_neurons = 0;
  std::vector<Array> seq_in;  // empty (default-constructed) for replayed slots
  std::vector<Array> seq_out;
  std::vector<Array> carried_init;   // [N] f32 or empty
  std::vector<Array> carried_final;  // [N] f32 ([N / final_group] summed in groups) or empty
  // 1, or kFinalGroup where it divides both neurons and inner (so a group lies in one row).
  std::int64_t final_group = 1;
  std::vector<Array> params;  // [1], [N] or [N / channel_neurons] f32
  // A kernel with a pooled seq_in slot (SequenceSlot::pool = k): the rows o of the neurons
  // (o = (b * pool_height + h) * pool_width + w, b any leading index) form pool_height x
  // pool_width images, both multiples of k, tiled by k x k windows. pool_source is what the
  // pool read, [outer, T, inner] u8 (the neurons' spikes); the pooled slot's array is
  // [outer / k², T, inner], one value per window and step, and the neuron at tap u of its
  // window reads the window's value where it holds the window's maximum at the first tap to hold
  // it (taps row-major), else 0: portable::pool_first_max_gradient.
  Array pool_source;
  std::int64_t pool_height = 0;
  std::int64_t pool_width = 0;
};

// Throws ValueError unless `launch` fits the pooled slot of `kernel` (when it has one): geometry,
// the source's dtype (u8) and element count, the pooled array's element count.
void check_pool_launch(const StepKernel& kernel, const StepKernelLaunch& launch);
// The pooled seq_in slot of `kernel`, or -1.
int pooled_slot(const StepKernel& kernel);

// Backends. Both check nothing beyond what the caller (snn/neuron_calls.cpp) guarantees.
void run_step_kernel_cpu(const StepKernel& kernel, const StepKernelLaunch& launch);
void run_step_kernel_cuda(const StepKernel& kernel, const StepKernelLaunch& launch);

}  // namespace flexkit::snn
