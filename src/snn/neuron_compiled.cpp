#include "snn/neuron_compiled.hpp"

#include <functional>

#include "core/text.hpp"
#include "flexkit/error.hpp"
#include "snn/step_autodiff.hpp"

namespace flexkit::snn {

using detail::cat;

std::shared_ptr<const NeuronCompiled> compile_neuron(NeuronSpec spec) {
  auto out = std::make_shared<NeuronCompiled>();
  out->spec = std::move(spec);
  out->step = lower_neuron(out->spec);
  out->residuals = plan_residuals(out->step, /*inputs_kept=*/false);
  for (std::size_t s = 0; s < out->spec.states.size(); ++s)
    out->initial_values.push_back(state_initial_value(out->spec, s));
  for (int value : out->step.outputs) {
    const ir::Instr* in = &out->step.body.instrs[static_cast<std::size_t>(value)];
    while (in->op == ir::Op::detach) in = &out->step.body.instrs[static_cast<std::size_t>(in->a)];
    const bool binary = in->op == ir::Op::spike ||
                        (in->op == ir::Op::constant && (in->constant == 0 || in->constant == 1));
    out->output_is_spike.push_back(binary);
  }
  return out;
}

bool writes_state_sequences(const ForwardKernelConfig& config) {
  return config.kind == NeuronKernelKind::inference ||
         (config.kind == NeuronKernelKind::training_forward && config.storage.keep_state_sequences);
}

std::vector<int> learnable_param_slots(const NeuronCompiled& neuron) {
  std::vector<int> slots;
  for (std::size_t p = 0; p < neuron.step.runtime_params.size(); ++p)
    if (neuron.step.learnable[p]) slots.push_back(static_cast<int>(p));
  return slots;
}

namespace {

std::string kernel_name(const NeuronCompiled& neuron, std::string_view kind) {
  std::string name;
  for (char c : neuron.spec.name)
    name += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  return cat(name, "_", kind);
}

// The forward step computing the residuals from the kept inputs (kernel slots from kept_base),
// the states (from their initial values) and the parameters.
StepReplay make_replay(const NeuronCompiled& neuron, int kept_base) {
  const LoweredStep& step = neuron.step;
  StepReplay r;
  for (std::size_t s = 0; s < neuron.spec.states.size(); ++s)
    r.carried.push_back({neuron.spec.states[s], static_cast<float>(neuron.initial_values[s])});
  std::vector<int> values = neuron.residuals;
  values.insert(values.end(), step.new_states.begin(), step.new_states.end());
  std::vector<int*> roots;
  for (int& v : values) roots.push_back(&v);
  r.body = prune_program(step.body, roots, /*strip_detach=*/true);
  for (ir::Instr& in : r.body.instrs)
    if (in.op == ir::Op::seq_in) in.slot += kept_base;
  const auto residuals = static_cast<std::ptrdiff_t>(neuron.residuals.size());
  r.values.assign(values.begin(), values.begin() + residuals);
  r.carried_next.assign(values.begin() + residuals, values.end());
  return r;
}

}  // namespace

bool replay_residuals(const NeuronCompiled& neuron, std::int64_t steps, bool initial_states_given) {
  return neuron.inputs_kept && !initial_states_given && steps <= kMaxReplaySteps &&
         !neuron.residuals.empty();
}

StepKernel make_forward_kernel(const NeuronCompiled& neuron, const ForwardKernelConfig& config) {
  const NeuronSpec& spec = neuron.spec;
  const LoweredStep& step = neuron.step;
  StepKernel k;
  k.name = kernel_name(neuron, to_string(config.kind));
  for (std::size_t i = 0; i < spec.inputs.size(); ++i)
    k.seq_in.push_back(
        {spec.inputs[i], config.input_dtypes.at(i), config.storage.repeat_steps > 0});
  for (std::size_t s = 0; s < spec.states.size(); ++s)
    k.carried.push_back({spec.states[s], static_cast<float>(neuron.initial_values[s])});
  k.params = step.runtime_params;

  std::vector<int> values;  // roots in the order of seq_out, then carried_next
  for (std::size_t o = 0; o < spec.outputs.size(); ++o) {
    const DType dtype =
        neuron.output_is_spike[o] ? config.storage.spike_dtype : config.storage.sequence_dtype;
    k.seq_out.push_back({spec.outputs[o], dtype});
    values.push_back(step.outputs[o]);
  }
  if (writes_state_sequences(config)) {
    for (std::size_t s = 0; s < spec.states.size(); ++s) {
      k.seq_out.push_back({spec.states[s], config.storage.sequence_dtype});
      values.push_back(step.new_states[s]);
    }
  }
  if (config.kind == NeuronKernelKind::training_forward && !config.residuals_replayed) {
    for (int r : neuron.residuals) {
      k.seq_out.push_back(
          {cat("residual ", residual_name(neuron, r)), config.storage.residual_dtype});
      values.push_back(r);
    }
  }
  const std::size_t outs = values.size();
  for (int v : step.new_states) values.push_back(v);
  std::vector<int*> roots;
  for (int& v : values) roots.push_back(&v);
  k.body = prune_program(step.body, roots, /*strip_detach=*/true);
  k.seq_out_value.assign(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(outs));
  k.carried_next.assign(values.begin() + static_cast<std::ptrdiff_t>(outs), values.end());
  return k;
}

StepKernel make_backward_kernel(const NeuronCompiled& neuron, const BackwardKernelConfig& config) {
  const NeuronSpec& spec = neuron.spec;
  const LoweredStep& step = neuron.step;
  const auto& fwd = step.body.instrs;
  StepKernel k;
  k.name = kernel_name(neuron, "backward");
  k.reverse = true;
  k.params = step.runtime_params;
  StepBuilder b;

  // Forward values are recomputed from the stored (or replayed) residuals and the parameters.
  std::vector<int> residual_slot(fwd.size(), -1);
  for (std::size_t r = 0; r < neuron.residuals.size(); ++r) {
    residual_slot[static_cast<std::size_t>(neuron.residuals[r])] = static_cast<int>(r);
    SequenceSlot slot{cat("residual ", residual_name(neuron, neuron.residuals[r])),
                      config.replayed ? DType::f32 : config.residual_dtype};
    slot.replayed = config.replayed;
    k.seq_in.push_back(std::move(slot));
  }
  const int kept_base = static_cast<int>(k.seq_in.size());
  if (neuron.inputs_kept)
    for (std::size_t i = 0; i < spec.inputs.size(); ++i)
      k.seq_in.push_back(
          {cat("input ", spec.inputs[i]), config.kept_inputs.at(i), config.steady_inputs});
  if (config.replayed) {
    if (!neuron.inputs_kept) throw std::logic_error("a replay needs the kept inputs");
    k.replay = make_replay(neuron, kept_base);
  }
  std::vector<int> memo(fwd.size(), -1);
  std::function<int(int)> forward_value = [&](int id) -> int {
    int& m = memo[static_cast<std::size_t>(id)];
    if (m >= 0) return m;
    const ir::Instr& in = fwd[static_cast<std::size_t>(id)];
    if (const int slot = residual_slot[static_cast<std::size_t>(id)]; slot >= 0) {
      m = b.leaf(ir::Op::seq_in, slot);
    } else if (in.op == ir::Op::constant) {
      m = b.constant(in.constant);
    } else if (in.op == ir::Op::param) {
      m = b.leaf(ir::Op::param, in.slot);
    } else if (in.op == ir::Op::seq_in && neuron.inputs_kept) {
      m = b.leaf(ir::Op::seq_in, kept_base + in.slot);
    } else if (in.op == ir::Op::seq_in || in.op == ir::Op::carried) {
      throw std::logic_error("residual plan does not cover a value the backward reads");
    } else if (in.op == ir::Op::detach) {
      m = forward_value(in.a);
    } else if (in.op == ir::Op::spike) {
      m = b.spike(forward_value(in.a), in.surrogate, in.alpha);
    } else {
      const int arity = ir::op_info(in.op).arity;
      m = b.op(in.op, forward_value(in.a), arity >= 2 ? forward_value(in.b) : -1,
               arity >= 3 ? forward_value(in.c) : -1);
    }
    return m;
  };

  AdjointSeeds seeds;
  for (std::size_t o = 0; o < spec.outputs.size(); ++o) {
    if (config.grad_outputs.at(o)) {
      seeds.outputs.push_back(b.leaf(ir::Op::seq_in, static_cast<int>(k.seq_in.size())));
      SequenceSlot slot{cat("grad ", spec.outputs[o]), *config.grad_outputs[o]};
      if (o < config.grad_output_pools.size()) slot.pool = config.grad_output_pools[o];
      k.seq_in.push_back(slot);
    } else {
      seeds.outputs.push_back(-1);
    }
  }
  for (std::size_t s = 0; s < spec.states.size(); ++s) {
    k.carried.push_back({cat("grad ", spec.states[s]), 0.0f});
    int seed = b.leaf(ir::Op::carried, static_cast<int>(s));
    if (config.grad_state_seqs.at(s)) {
      const int g = b.leaf(ir::Op::seq_in, static_cast<int>(k.seq_in.size()));
      k.seq_in.push_back({cat("grad ", spec.states[s], " sequence"), *config.grad_state_seqs[s]});
      seed = b.op(ir::Op::add, seed, g);
    }
    seeds.new_states.push_back(seed);
  }
  const AdjointResult grads = emit_adjoint(step, b, forward_value, seeds);

  std::vector<int> values;
  if (!config.steady_inputs)
    for (std::size_t i = 0; i < spec.inputs.size(); ++i) {
      k.seq_out.push_back({cat("grad ", spec.inputs[i]), DType::f32});
      values.push_back(grads.inputs[i] >= 0 ? grads.inputs[i] : b.constant(0.0f));
    }
  for (std::size_t s = 0; s < spec.states.size(); ++s)
    values.push_back(grads.old_states[s] >= 0 ? grads.old_states[s] : b.constant(0.0f));
  if (config.steady_inputs)  // summed over the steps, like a per-neuron parameter's gradient
    for (std::size_t i = 0; i < spec.inputs.size(); ++i) {
      const int acc = b.leaf(ir::Op::carried, static_cast<int>(k.carried.size()));
      k.carried.push_back({cat("grad ", spec.inputs[i], " (summed over the steps)"), 0.0f});
      values.push_back(grads.inputs[i] >= 0 ? b.op(ir::Op::add, acc, grads.inputs[i]) : acc);
    }
  for (int slot : learnable_param_slots(neuron)) {
    const int acc = b.leaf(ir::Op::carried, static_cast<int>(k.carried.size()));
    const ParamSlot& param = step.runtime_params[static_cast<std::size_t>(slot)];
    // A scalar or per-channel parameter's partials are summed further: in groups first.
    k.carried.push_back({cat("grad ", param.name), 0.0f, !param.per_neuron});
    const int g = grads.params[static_cast<std::size_t>(slot)];
    values.push_back(g >= 0 ? b.op(ir::Op::add, acc, g) : acc);
  }
  std::vector<int*> roots;
  for (int& v : values) roots.push_back(&v);
  k.body = prune_program(b.program(), roots, /*strip_detach=*/true);
  const std::size_t outs = config.steady_inputs ? 0 : spec.inputs.size();
  k.seq_out_value.assign(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(outs));
  k.carried_next.assign(values.begin() + static_cast<std::ptrdiff_t>(outs), values.end());
  return k;
}

namespace {

// A value as an expression over the body's names, e.g. "h - 1" for an unnamed difference.
std::string value_text(const NeuronCompiled& neuron, int value, int depth) {
  const std::string& name = neuron.step.value_names[static_cast<std::size_t>(value)];
  if (!name.empty()) return name;
  const ir::Instr& in = neuron.step.body.instrs[static_cast<std::size_t>(value)];
  if (in.op == ir::Op::constant) return cat(in.constant);
  if (depth > 3) return cat("%", value);
  auto arg = [&](int id) { return value_text(neuron, id, depth + 1); };
  const char* infix = in.op == ir::Op::add   ? " + "
                      : in.op == ir::Op::sub ? " - "
                      : in.op == ir::Op::mul ? " * "
                      : in.op == ir::Op::div ? " / "
                                             : nullptr;
  std::string text;
  if (infix) {
    text = cat(arg(in.a), infix, arg(in.b));
    return depth > 0 ? cat("(", text, ")") : text;
  }
  text = cat(ir::op_info(in.op).name, "(");
  const int arity = ir::op_info(in.op).arity;
  for (int j = 0; j < arity; ++j)
    text += cat(j ? ", " : "", arg(j == 0 ? in.a : j == 1 ? in.b : in.c));
  return text + ")";
}

}  // namespace

namespace {

std::shared_ptr<const StepKernel> memoised(const NeuronCompiled& neuron, const std::string& key,
                                           const std::function<StepKernel()>& make) {
  {
    std::lock_guard<std::mutex> lock(neuron.kernels_mutex);
    if (auto it = neuron.kernels.find(key); it != neuron.kernels.end()) return it->second;
  }
  StepKernel k = make();
  k.structure = step_kernel_structure(k);
  auto shared = std::make_shared<const StepKernel>(std::move(k));
  std::lock_guard<std::mutex> lock(neuron.kernels_mutex);
  return neuron.kernels.emplace(key, std::move(shared)).first->second;
}

std::string dtype_key(const std::optional<DType>& d) {
  return d ? std::string(dtype_name(*d)) : std::string("-");
}

}  // namespace

std::shared_ptr<const StepKernel> forward_kernel(const NeuronCompiled& neuron,
                                                 const ForwardKernelConfig& config) {
  std::string key =
      cat("fwd ", to_string(config.kind), " ", dtype_name(config.storage.sequence_dtype), " ",
          dtype_name(config.storage.spike_dtype), " ", dtype_name(config.storage.residual_dtype),
          " ", config.storage.keep_state_sequences, " repeat ", config.storage.repeat_steps > 0,
          " replayed ", config.residuals_replayed, " in");
  for (DType d : config.input_dtypes) key += cat(" ", dtype_name(d));
  return memoised(neuron, key, [&] { return make_forward_kernel(neuron, config); });
}

std::shared_ptr<const StepKernel> backward_kernel(const NeuronCompiled& neuron,
                                                  const BackwardKernelConfig& config) {
  std::string key = cat("bwd ", dtype_name(config.residual_dtype), " steady ", config.steady_inputs,
                        " replayed ", config.replayed, " kept");
  for (DType d : config.kept_inputs) key += cat(" ", dtype_name(d));
  key += " out";
  for (const auto& d : config.grad_outputs) key += cat(" ", dtype_key(d));
  key += " pools";
  for (int pool : config.grad_output_pools) key += cat(" ", pool);
  key += " states";
  for (const auto& d : config.grad_state_seqs) key += cat(" ", dtype_key(d));
  return memoised(neuron, key, [&] { return make_backward_kernel(neuron, config); });
}

std::string residual_name(const NeuronCompiled& neuron, int value) {
  return value_text(neuron, value, 0);
}

namespace {

std::string listing(const StepProgram& program, const std::vector<std::string>* names) {
  std::string out;
  for (std::size_t i = 0; i < program.instrs.size(); ++i) {
    const ir::Instr& in = program.instrs[i];
    out += cat("  %", i, " = ", ir::op_info(in.op).name);
    if (in.op == ir::Op::constant) out += cat(" ", in.constant);
    if (in.op == ir::Op::seq_in || in.op == ir::Op::carried || in.op == ir::Op::param)
      out += cat(" #", in.slot);
    if (in.op == ir::Op::spike || in.op == ir::Op::spike_grad)
      out += cat(" ", surrogate_name(in.surrogate), "(", in.alpha, ")");
    const int arity = ir::op_info(in.op).arity;
    for (int j = 0; j < arity; ++j)
      out += cat(j == 0 ? " %" : ", %", j == 0 ? in.a : j == 1 ? in.b : in.c);
    if (names && !(*names)[i].empty()) out += cat("    # ", (*names)[i]);
    out += "\n";
  }
  return out;
}

}  // namespace

std::string describe_forward(const NeuronCompiled& neuron) {
  // Without the values no output or state depends on (the branches that fixed flags drop).
  const LoweredStep& step = neuron.step;
  std::vector<int> values = step.outputs;
  values.insert(values.end(), step.new_states.begin(), step.new_states.end());
  std::vector<int*> roots;
  for (int& v : values) roots.push_back(&v);
  const StepProgram body = prune_program(step.body, roots, /*strip_detach=*/false);
  // Names follow their values through the renumbering (prune keeps the order).
  std::vector<std::string> names(body.instrs.size());
  {
    std::vector<int> keep = step.outputs;
    keep.insert(keep.end(), step.new_states.begin(), step.new_states.end());
    std::vector<char> live(step.body.instrs.size(), 0);
    for (int v : keep) live[static_cast<std::size_t>(v)] = 1;
    for (std::size_t i = live.size(); i-- > 0;) {
      if (!live[i] || ir::op_info(step.body.instrs[i].op).arity == 0) continue;
      const ir::Instr& in = step.body.instrs[i];
      for (int operand : {in.a, in.b, in.c})
        if (operand >= 0) live[static_cast<std::size_t>(operand)] = 1;
    }
    std::size_t next = 0;
    for (std::size_t i = 0; i < live.size() && next < names.size(); ++i)
      if (live[i]) names[next++] = step.value_names[i];
  }
  std::string out = listing(body, &names);
  const std::size_t outputs = step.outputs.size();
  for (std::size_t o = 0; o < outputs; ++o)
    out += cat("  output ", neuron.spec.outputs[o], " = %", values[o], "\n");
  for (std::size_t s = 0; s < step.new_states.size(); ++s)
    out += cat("  state ", neuron.spec.states[s], " <- %", values[outputs + s], "\n");
  return out;
}

std::string describe_backward(const NeuronCompiled& neuron) {
  BackwardKernelConfig config;
  config.grad_outputs.assign(neuron.spec.outputs.size(), DType::f32);
  config.grad_state_seqs.assign(neuron.spec.states.size(), DType::f32);
  return to_string(make_backward_kernel(neuron, config));
}

}  // namespace flexkit::snn
