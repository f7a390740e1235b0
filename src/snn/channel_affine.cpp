// A neuron with a BatchNorm folded in front of it (see channel_affine_neuron). The normalisation
// is written in its centred form, (x - center) * scale + shift, so that the gradient of scale is
// sum(grad * (x - center)) directly, not sum(grad * x) - center * sum(grad), which cancels when
// the mean is large beside the spread.
#include "core/text.hpp"
#include "flexkit/error.hpp"
#include "snn/neuron_compiled.hpp"
#include "snn/step_autodiff.hpp"
#include "snn/step_builder.hpp"

namespace flexkit::snn {

using detail::cat;

namespace {

std::shared_ptr<const NeuronCompiled> derive(const NeuronCompiled& base) {
  if (base.spec.inputs.size() != 1)
    throw ValueError(cat("neuron ", base.spec.name,
                         ": a per-channel input affine needs a neuron with one input, it has ",
                         base.spec.inputs.size()));
  if (base.inputs_kept)
    throw ValueError(cat("neuron ", base.spec.name, " already has a per-channel input affine"));
  auto out = std::make_shared<NeuronCompiled>();
  out->spec = base.spec;
  out->spec.name = cat(base.spec.name, "_bn_input");
  out->initial_values = base.initial_values;
  out->output_is_spike = base.output_is_spike;
  out->inputs_kept = true;

  const LoweredStep& from = base.step;
  LoweredStep& step = out->step;
  step.num_inputs = from.num_inputs;
  step.runtime_params = from.runtime_params;
  step.learnable = from.learnable;
  step.runtime_param_of = from.runtime_param_of;
  const int first = static_cast<int>(step.runtime_params.size());
  for (const char* name : {"bn_center", "bn_scale", "bn_shift"}) {
    ParamSlot slot;
    slot.name = name;
    slot.per_channel = true;
    step.runtime_params.push_back(slot);
    step.learnable.push_back(std::string_view(name) != "bn_center");
  }

  // The map first, then the neuron's body with its input read through the map. Copied verbatim
  // (raw), so every value keeps its meaning and only its number moves.
  StepBuilder b;
  std::vector<std::string> names;
  auto named = [&](int id, std::string name) {
    if (static_cast<std::size_t>(id) >= names.size())
      names.resize(static_cast<std::size_t>(id) + 1);
    names[static_cast<std::size_t>(id)] = std::move(name);
    return id;
  };
  const std::string& x = base.spec.inputs[0];
  const int raw = named(b.leaf(ir::Op::seq_in, 0), cat(x, " (before the affine)"));
  const int center = b.leaf(ir::Op::param, first);
  const int scale = b.leaf(ir::Op::param, first + 1);
  const int shift = b.leaf(ir::Op::param, first + 2);
  const int mapped = named(
      b.raw({ir::Op::add, b.raw({ir::Op::mul, b.raw({ir::Op::sub, raw, center}), scale}), shift}),
      x);
  std::vector<int> map(from.body.instrs.size(), -1);
  for (std::size_t i = 0; i < from.body.instrs.size(); ++i) {
    ir::Instr in = from.body.instrs[i];
    if (in.op == ir::Op::seq_in) {
      map[i] = mapped;
      continue;
    }
    if (ir::op_info(in.op).arity > 0)
      for (std::int32_t* operand : {&in.a, &in.b, &in.c})
        if (*operand >= 0) *operand = map[static_cast<std::size_t>(*operand)];
    map[i] = b.raw(in);
    if (i < from.value_names.size() && !from.value_names[i].empty())
      named(map[i], from.value_names[i]);
  }
  step.body = b.program();
  names.resize(step.body.instrs.size());
  step.value_names = std::move(names);
  for (int v : from.outputs) step.outputs.push_back(map[static_cast<std::size_t>(v)]);
  for (int v : from.new_states) step.new_states.push_back(map[static_cast<std::size_t>(v)]);
  out->residuals = plan_residuals(step, /*inputs_kept=*/true);
  return out;
}

}  // namespace

std::shared_ptr<const NeuronCompiled> channel_affine_neuron(const NeuronCompiled& neuron) {
  std::lock_guard<std::mutex> lock(neuron.kernels_mutex);
  if (!neuron.channel_affine) neuron.channel_affine = derive(neuron);
  return neuron.channel_affine;
}

}  // namespace flexkit::snn
