// FlexSN: user-defined spiking neurons compiled into fused multi-step kernels.
//
// A Neuron is a single-step body (from the neuron language, a built-in, or NeuronBuilder) with
// its fixed parameters bound. Calls run all T steps in one kernel launch per call, on the device
// of the input arrays (cpu or cuda), with the state in registers between steps:
//
//   Neuron lif = Neuron::builtin("lif").with("tau", 5.0);
//   NeuronForward f = neuron_forward(lif, NeuronKernelKind::training_forward, {{"x", x}});
//   NeuronGradients g = neuron_backward(lif, *f.residuals, {{"s", grad_s}});
//   // g.inputs["x"], g.initial_states["v"], g.params[...] (learnable parameters)
//
// Sequences are [T, *shape] (or T at another axis, NeuronStorage::time_axis) and states
// [*shape]; every element of *shape is one neuron.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "flexkit/array.hpp"
#include "flexkit/autoflex.hpp"
#include "flexkit/expr.hpp"
#include "flexkit/neuron_language.hpp"

namespace flexkit {

namespace snn {
struct NeuronCompiled;
}

// The four generated kernel kinds.
enum class NeuronKernelKind : std::uint8_t {
  inference,              // output and state sequences
  inference_final_state,  // output sequences, final states only
  training_forward,       // output sequences, final states, residuals (state sequences on request)
  backward,               // gradients of inputs, initial states and learnable parameters
};
std::string_view to_string(NeuronKernelKind kind);

// How a call stores the sequences it writes. Each flex16 sequence records its statistics
// (max |m|, saturations, NaNs: Array::stats) as any flex16 write, and takes its exponent from
// iwl_policy: fixed stores every one at flex16_iwl; exact gives each the smallest iwl that holds
// its values (an extra float32 run of the kernel first); autoflex gives each the iwl its manager
// in `autoflex` predicts, by the sequence's name (an output or state name, or "residual NAME"),
// and a manager's first write is exact.
struct NeuronStorage {
  DType sequence_dtype = DType::f32;  // outputs and state sequences: f32, bf16 or flex16
  DType spike_dtype = DType::f32;     // outputs that are spikes: f32, bf16, flex16 or u8 (0/1)
  DType residual_dtype = DType::f32;  // what training_forward keeps for backward
  int flex16_iwl = 4;                 // IwlPolicy::fixed only
  IwlPolicy iwl_policy = IwlPolicy::fixed;
  AutoflexSet autoflex;  // IwlPolicy::autoflex: copies of a storage share these managers
  bool keep_state_sequences = false;  // training_forward: also return the state sequences
  // Where T sits in every sequence the call reads and writes: 0 is [T, *shape]; k > 0 is
  // [shape[0..k), T, shape[k..)], so that a network's (C, H, W, T, N) or (F, T, N) activations
  // are read and written in place. States, final states, per-neuron params and initial-state
  // gradients stay [*shape] (shape = the sequence shape without the time axis).
  int time_axis = 0;
  // 0: the inputs carry their T steps. k > 0: every input has one step (size 1 at time_axis),
  // read at each of k steps (a constant input current, e.g. an image) without being repeated in
  // memory; the outputs have k steps, and neuron_backward returns the inputs' gradients summed
  // over the steps, in the inputs' one-step shape.
  std::int64_t repeat_steps = 0;
};

// A parameter's role: fixed ones are compiled into the kernel; learnable and per-neuron ones are
// kernel arguments (a learnable one gets a gradient).
struct NeuronParamInfo {
  std::string name;
  double value = 0;  // the bound value (fixed), or the default (learnable / per-neuron)
  bool learnable = false;
  bool per_neuron = false;
};

// What training_forward keeps for backward: the planned per-step values, the call's runtime
// parameter values and its geometry. Opaque apart from its size.
struct NeuronResiduals;
std::size_t residual_bytes(const NeuronResiduals& residuals);

using NamedArrays = std::map<std::string, Array>;

class Neuron {
 public:
  // Throws NeuronError (with line:column) for text that is not a valid neuron.
  static Neuron parse(std::string_view text, std::string_view origin = "<string>");
  static Neuron builtin(std::string_view name);
  // A built-in name, else a file in the neuron language.
  static Neuron named_or_file(std::string_view name_or_path);

  // The neuron with parameter `name` bound to value (a fixed parameter) or defaulting to it.
  Neuron with(std::string_view name, double value) const;
  // SpikingJelly-style settings, as the command line spells them: any parameter by name with a
  // number, plus `v_reset=none` (soft reset), `decay_input` / `detach_reset` = true|false|1|0,
  // `surrogate=NAME[(alpha)]` (every spike of the body) and PLIF's `init_tau` (w =
  // -log(init_tau-1)).
  Neuron with_setting(std::string_view name, std::string_view value) const;
  // The neuron with its one input first mapped per channel c (the first axis of the neuron
  // shape): x' = (x - bn_center[c]) * bn_scale[c] + bn_shift[c], a BatchNorm folded into the
  // neuron so that the normalised values are never stored. The three are per-channel parameters
  // ([C] arrays, always given); bn_scale and bn_shift are learnable, so neuron_backward returns
  // sum(dL/dx' * (x - bn_center)) and sum(dL/dx') per channel, and dL/dx = dL/dx' * bn_scale.
  // The training forward keeps a reference to its input for the backward instead of storing a
  // copy: leave the input unchanged until then. Up to T = 16 steps, without initial states, it
  // stores no residuals either: the backward replays the steps forward from the input first
  // (the same floats as f32 residuals; residual_bytes is 0).
  Neuron with_channel_affine() const;

  const std::string& name() const;
  const std::vector<std::string>& inputs() const;
  const std::vector<std::string>& states() const;
  const std::vector<std::string>& outputs() const;
  std::vector<NeuronParamInfo> params() const;
  // The value a state starts from when no initial state is given (its `init`, else 0).
  double initial_state_value(std::string_view state) const;

  // Introspection (what `flexkit neuron show` prints).
  std::string source() const;                      // canonical neuron-language text
  std::string forward_program() const;             // the lowered step body
  std::string backward_program() const;            // the derived backward step body
  std::vector<std::string> residual_plan() const;  // values stored per neuron-step
  // The generated CUDA program; UnsupportedError in a build without the CUDA backend.
  std::string cuda_source(NeuronKernelKind kind) const;
  std::string cpu_program(NeuronKernelKind kind) const;

  const snn::NeuronCompiled& compiled() const { return *impl_; }
  const std::shared_ptr<const snn::NeuronCompiled>& compiled_ptr() const { return impl_; }

 private:
  explicit Neuron(std::shared_ptr<const snn::NeuronCompiled> impl) : impl_(std::move(impl)) {}
  friend class NeuronBuilder;
  std::shared_ptr<const snn::NeuronCompiled> impl_;
};

// Sequences below are "[T, *shape]" with T at NeuronStorage::time_axis (the inputs' layout).
struct NeuronForward {
  NamedArrays outputs;          // [T, *shape] by output name
  NamedArrays state_sequences;  // [T, *shape] by state name (inference; training on request)
  NamedArrays final_states;     // [*shape] by state name (f32)
  std::shared_ptr<const NeuronResiduals> residuals;  // training_forward only
};

struct NeuronGradients {
  NamedArrays inputs;          // dL/dx, [T, *shape] f32, by input name
  NamedArrays initial_states;  // dL/dv0, [*shape] f32, by state name
  NamedArrays params;          // learnable parameters: [] (scalar) or [*shape] (per-neuron), f32
};

// Runs one of the three forward kinds. `inputs` holds every input sequence by name (the same
// full shape, T at storage.time_axis, which must be in [0, rank - 1]; dtype f32, bf16, flex16
// or u8, or f64 which is converted to f32 first);
// `initial_states` any subset of the states
// ([*shape], any float dtype; absent ones start at initial_state_value); `params` values for
// learnable / per-neuron parameters ([] or [1] for scalars, [*shape] per neuron; absent ones use
// their defaults). Errors (ShapeError, DTypeError, DeviceError, ValueError) name the argument;
// nothing is returned half-written.
NeuronForward neuron_forward(const Neuron& neuron, NeuronKernelKind kind, const NamedArrays& inputs,
                             const NamedArrays& initial_states = {}, const NamedArrays& params = {},
                             const NeuronStorage& storage = {});

// An output's gradient given as that of a max pool applied to the output: a k x k window of
// stride k over the two neuron axes right before the time axis (so the time axis is at 2 or
// later), windows tiling them. `gradient` is dL/d(pooled output), the output's full shape with
// those two axes divided by k (f32, f64, bf16 or flex16); `source` is the output the pool read,
// u8 (spikes), in the output's full shape. The backward kernel hands each window's gradient to
// the first tap (row-major) holding the window's maximum, as PyTorch's max pool does, without
// the output-sized gradient ever being stored.
struct PooledGradient {
  Array gradient;
  Array source;
  std::int64_t kernel = 2;  // k, 1 to kMaxKernel
  static constexpr std::int64_t kMaxKernel = 4;
};

// The backward kernel over a training_forward's residuals. Gradients are by name: output
// sequences (`s`), state sequences (`v`, [T, *shape]) and final states (`v` in
// grad_final_states); absent ones are zero. Sequences (the gradients given and dL/dx) are in
// the forward's layout: the full shape of its inputs, T at its time_axis. Parameter gradients are
// reduced over neurons and time in a fixed order, so they are deterministic.
// initial_state_gradients = false leaves NeuronGradients::initial_states empty (a caller whose
// states start from constants needs none): nothing is stored for them. pooled_grad_outputs
// gives at most one output's gradient through a max pool instead (not also in grad_outputs).
NeuronGradients neuron_backward(
    const Neuron& neuron, const NeuronResiduals& residuals, const NamedArrays& grad_outputs,
    const NamedArrays& grad_state_sequences = {}, const NamedArrays& grad_final_states = {},
    bool initial_state_gradients = true,
    const std::map<std::string, PooledGradient>& pooled_grad_outputs = {});

// A stateful layer: holds the states between calls (continuing a sequence), the learnable and
// per-neuron parameter values, and the residuals of its last training call.
class NeuronLayer {
 public:
  explicit NeuronLayer(Neuron neuron, NeuronStorage storage = {});

  // Inference: outputs by name; the layer's states advance to the final states.
  NamedArrays operator()(const NamedArrays& inputs);
  // Training: as operator(), also keeping the residuals for backward().
  NamedArrays forward(const NamedArrays& inputs);
  // Gradients of the last forward(); the parameter gradients are added to grads().
  NeuronGradients backward(const NamedArrays& grad_outputs,
                           const NamedArrays& grad_final_states = {});
  void reset();  // states back to their initial values; drops residuals

  const NamedArrays& states() const { return states_; }
  NamedArrays& params() { return params_; }  // learnable / per-neuron values
  const NamedArrays& grads() const { return grads_; }
  void zero_grad() { grads_.clear(); }
  const Neuron& neuron() const { return neuron_; }

 private:
  Neuron neuron_;
  NeuronStorage storage_;
  NamedArrays states_;
  NamedArrays params_;
  NamedArrays grads_;
  std::shared_ptr<const NeuronResiduals> residuals_;
};

// ---- C++ builder: the same body as the text language, checked the same way ----------------
// A value of the body under construction. Reading a state gives its value at the point where
// the statement using it is added: before update() the previous step's, after it the new one.
class NeuronValue {
 public:
  NeuronValue(double constant);  // NOLINT: numbers mix freely with values
  const std::string& text() const { return text_; }

 private:
  friend class NeuronBuilder;
  friend NeuronValue neuron_value_from_text(std::string text);
  explicit NeuronValue(std::string text, int) : text_(std::move(text)) {}
  std::string text_;
};
NeuronValue neuron_value_from_text(std::string text);

NeuronValue operator+(const NeuronValue& a, const NeuronValue& b);
NeuronValue operator-(const NeuronValue& a, const NeuronValue& b);
NeuronValue operator*(const NeuronValue& a, const NeuronValue& b);
NeuronValue operator/(const NeuronValue& a, const NeuronValue& b);
NeuronValue operator-(const NeuronValue& a);
NeuronValue operator<(const NeuronValue& a, const NeuronValue& b);
NeuronValue operator<=(const NeuronValue& a, const NeuronValue& b);
NeuronValue operator>(const NeuronValue& a, const NeuronValue& b);
NeuronValue operator>=(const NeuronValue& a, const NeuronValue& b);
// Any function of the language by name: call("exp", {z}), call("where", {c, a, b}).
NeuronValue call(std::string_view function, const std::vector<NeuronValue>& args);
// spike(z, surrogate) with a surrogate of the neuron language ("sigmoid", "atan", ...); alpha < 0 =
// default.
NeuronValue spike(const NeuronValue& z, std::string_view surrogate = "sigmoid", double alpha = -1);
NeuronValue detach(const NeuronValue& z);

class NeuronBuilder {
 public:
  explicit NeuronBuilder(std::string name);
  NeuronValue input(const std::string& name);
  NeuronValue state(const std::string& name, double initial_value = 0.0);
  NeuronValue param(const std::string& name, double value, bool learnable = false,
                    bool per_neuron = false);
  NeuronValue let(const std::string& name, const NeuronValue& value);  // a named temporary
  void output(const std::string& name, const NeuronValue& value);
  void update(const std::string& state, const NeuronValue& value);
  // The neuron-language text built so far, and the checked neuron (NeuronError as for text).
  std::string text() const;
  Neuron build() const;

 private:
  std::string name_;
  std::vector<std::string> inputs_, states_, outputs_, declarations_, statements_;
};

}  // namespace flexkit
