// FlexSN neurons from Python: built-ins with SpikingJelly's settings, the neuron language, the
// multi-step forward kinds and the backward kernel, with their results as dicts of arrays.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

#include "bindings.hpp"
#include "flexkit/cuda.hpp"
#include "flexkit/error.hpp"
#include "flexkit/neuron.hpp"

namespace flexkit::python {

namespace {

NeuronKernelKind kind_from(const std::string& name) {
  for (auto kind : {NeuronKernelKind::inference, NeuronKernelKind::inference_final_state,
                    NeuronKernelKind::training_forward, NeuronKernelKind::backward})
    if (to_string(kind) == name) return kind;
  throw nb::value_error(("unknown neuron kernel kind '" + name +
                         "'; kinds: inference, inference_final_state, training_forward, backward")
                            .c_str());
}

// A Python value as the setting text `with_setting` reads: None is "none" (v_reset=None: the
// soft reset), booleans "true"/"false", numbers with every digit, strings as they are.
std::string setting_text(nb::handle value) {
  if (value.is_none()) return "none";
  if (PyBool_Check(value.ptr())) return value.ptr() == Py_True ? "true" : "false";
  if (PyFloat_Check(value.ptr()) || PyLong_Check(value.ptr())) {
    char buffer[40];
    std::snprintf(buffer, sizeof buffer, "%.17g", nb::cast<double>(value));
    return buffer;
  }
  if (nb::isinstance<nb::str>(value)) return nb::cast<std::string>(value);
  throw nb::type_error("a neuron setting is a number, a bool, None or a string");
}

Neuron with_settings(Neuron neuron, const nb::kwargs& settings) {
  for (auto [key, value] : settings)
    neuron = neuron.with_setting(nb::cast<std::string>(key), setting_text(value));
  return neuron;
}

NeuronStorage storage_from(nb::handle value) {
  if (value.is_none()) return {};
  if (nb::isinstance<NeuronStorage>(value)) return nb::cast<NeuronStorage>(value);
  if (!nb::isinstance<nb::dict>(value))
    throw nb::type_error("storage: a flexkit.NeuronStorage or a dict of its fields");
  NeuronStorage s;
  for (auto [key, item] : nb::borrow<nb::dict>(value)) {
    const std::string name = nb::cast<std::string>(key);
    if (name == "sequence_dtype")
      s.sequence_dtype = dtype_from(item);
    else if (name == "spike_dtype")
      s.spike_dtype = dtype_from(item);
    else if (name == "residual_dtype")
      s.residual_dtype = dtype_from(item);
    else if (name == "flex16_iwl")
      s.flex16_iwl = nb::cast<int>(item);
    else if (name == "iwl_policy")
      s.iwl_policy = iwl_policy_from(nb::cast<std::string>(item));
    else if (name == "keep_state_sequences")
      s.keep_state_sequences = nb::cast<bool>(item);
    else if (name == "time_axis")
      s.time_axis = nb::cast<int>(item);
    else
      throw nb::value_error(("storage: unknown field '" + name +
                             "' (sequence_dtype, spike_dtype, residual_dtype, flex16_iwl, "
                             "iwl_policy, keep_state_sequences, time_axis)")
                                .c_str());
  }
  return s;
}

// A single array for a one-input neuron, else a dict by input name.
NamedArrays inputs_from(const Neuron& neuron, nb::handle value) {
  if (!nb::isinstance<nb::dict>(value)) {
    if (neuron.inputs().size() != 1)
      throw nb::value_error(("neuron " + neuron.name() + " has " +
                             std::to_string(neuron.inputs().size()) +
                             " inputs: pass a dict by input name")
                                .c_str());
    return {{neuron.inputs()[0], to_array(value)}};
  }
  return named_arrays_from(value, "inputs");
}

// Runs `body` with `stream` (a cudaStream_t as an int) current on the device of `like`.
template <class Body>
auto on_stream(nb::handle stream, const NamedArrays& like, Body&& body) {
  if (stream.is_none() || like.empty()) return body();
  const Device device = like.begin()->second.device();
  if (!device.is_cuda()) return body();
  cuda::StreamGuard guard(device.index, reinterpret_cast<void*>(nb::cast<std::uintptr_t>(stream)));
  return body();
}

nb::dict param_info(const NeuronParamInfo& p) {
  nb::dict d;
  d["name"] = p.name;
  d["value"] = p.value;
  d["learnable"] = p.learnable;
  d["per_neuron"] = p.per_neuron;
  return d;
}

// A DLPack capsule or array-like as a flexkit array (capsules: the zero-copy import).
Array import_or_array(nb::handle value) {
  if (PyCapsule_CheckExact(value.ptr())) return import_dlpack(value, true);
  return to_array(value);
}

// What training_forward keeps for backward, opaque to Python apart from its size.
struct Residuals {
  std::shared_ptr<const NeuronResiduals> residuals;
};

// NeuronStorage, and the opaque residuals and the two result classes of a call.
void bind_storage_and_results(nb::module_& m) {
  nb::class_<NeuronStorage>(m, "NeuronStorage",
                            "How a neuron call stores the sequences it writes: sequence_dtype\n"
                            "(outputs and state sequences: f32, bf16 or flex16), spike_dtype\n"
                            "(spike outputs: also u8), residual_dtype (what training_forward\n"
                            "keeps), flex16_iwl, iwl_policy (flex16: 'fixed' at flex16_iwl,\n"
                            "'exact' per sequence, or 'autoflex': predicted per sequence by\n"
                            "managers that copies of this storage share across calls),\n"
                            "keep_state_sequences, and time_axis (where T sits: 0 is [T, *shape]).")
      .def(
          "__init__",
          [](NeuronStorage* s, nb::handle sequence_dtype, nb::handle spike_dtype,
             nb::handle residual_dtype, int flex16_iwl, const std::string& iwl_policy,
             bool keep_state_sequences, int time_axis) {
            new (s) NeuronStorage();
            s->iwl_policy = iwl_policy_from(iwl_policy);
            s->sequence_dtype = dtype_from(sequence_dtype);
            s->spike_dtype = dtype_from(spike_dtype);
            s->residual_dtype = dtype_from(residual_dtype);
            s->flex16_iwl = flex16_iwl;
            s->keep_state_sequences = keep_state_sequences;
            s->time_axis = time_axis;
          },
          nb::kw_only(), nb::arg("sequence_dtype") = "f32", nb::arg("spike_dtype") = "f32",
          nb::arg("residual_dtype") = "f32", nb::arg("flex16_iwl") = 4,
          nb::arg("iwl_policy") = "fixed", nb::arg("keep_state_sequences") = false,
          nb::arg("time_axis") = 0)
      .def_prop_rw(
          "sequence_dtype",
          [](const NeuronStorage& s) { return std::string(dtype_name(s.sequence_dtype)); },
          [](NeuronStorage& s, nb::handle d) { s.sequence_dtype = dtype_from(d); })
      .def_prop_rw(
          "spike_dtype",
          [](const NeuronStorage& s) { return std::string(dtype_name(s.spike_dtype)); },
          [](NeuronStorage& s, nb::handle d) { s.spike_dtype = dtype_from(d); })
      .def_prop_rw(
          "residual_dtype",
          [](const NeuronStorage& s) { return std::string(dtype_name(s.residual_dtype)); },
          [](NeuronStorage& s, nb::handle d) { s.residual_dtype = dtype_from(d); })
      .def_rw("flex16_iwl", &NeuronStorage::flex16_iwl)
      .def_prop_rw(
          "iwl_policy",
          [](const NeuronStorage& s) { return std::string(iwl_policy_name(s.iwl_policy)); },
          [](NeuronStorage& s, const std::string& p) { s.iwl_policy = iwl_policy_from(p); })
      .def_rw("keep_state_sequences", &NeuronStorage::keep_state_sequences)
      .def_rw("time_axis", &NeuronStorage::time_axis);

  nb::class_<Residuals>(m, "NeuronResiduals",
                        "What a training_forward call keeps for backward (opaque).")
      .def_prop_ro("nbytes", [](const Residuals& r) { return residual_bytes(*r.residuals); });

  nb::class_<NeuronForward>(m, "NeuronForward",
                            "The result of Neuron.forward: dicts of flexkit arrays by name.")
      .def_prop_ro(
          "outputs", [](const NeuronForward& f) { return named_arrays_to_dict(f.outputs); },
          "Output sequences [T, *shape] by output name.")
      .def_prop_ro(
          "state_sequences",
          [](const NeuronForward& f) { return named_arrays_to_dict(f.state_sequences); },
          "State sequences [T, *shape] by state name (inference; training on request).")
      .def_prop_ro(
          "final_states",
          [](const NeuronForward& f) { return named_arrays_to_dict(f.final_states); },
          "Final states [*shape] by state name.")
      .def_prop_ro(
          "residuals",
          [](const NeuronForward& f) -> nb::object {
            if (!f.residuals) return nb::none();
            return nb::cast(Residuals{f.residuals});
          },
          "training_forward: what backward needs; None for the other kinds.");

  nb::class_<NeuronGradients>(m, "NeuronGradients",
                              "The result of Neuron.backward: dicts of f32 gradients by name.")
      .def_prop_ro(
          "inputs", [](const NeuronGradients& g) { return named_arrays_to_dict(g.inputs); },
          "dL/dx [T, *shape] by input name.")
      .def_prop_ro(
          "initial_states",
          [](const NeuronGradients& g) { return named_arrays_to_dict(g.initial_states); },
          "dL/dv0 [*shape] by state name.")
      .def_prop_ro(
          "params", [](const NeuronGradients& g) { return named_arrays_to_dict(g.params); },
          "Learnable parameters' gradients, reduced over neurons and time in a fixed\n"
          "order (deterministic).");
}

// How a neuron is made (built-ins, text, files, settings) and what it says about itself.
void bind_construction_and_introspection(nb::class_<Neuron>& neuron) {
  neuron
      .def_static(
          "builtin",
          [](const std::string& name, const nb::kwargs& settings) {
            return with_settings(Neuron::builtin(name), settings);
          },
          nb::arg("name"), nb::arg("settings"),
          "A built-in neuron with settings by SpikingJelly's names, e.g.\n"
          "Neuron.builtin('lif', tau=5.0, v_reset=None, surrogate='atan(2)').")
      .def_static(
          "parse",
          [](const std::string& text, const std::string& origin) {
            return Neuron::parse(text, origin);
          },
          nb::arg("text"), nb::arg("origin") = "<string>",
          "A neuron from neuron-language text; NeuronError (a ValueError) with line:column.")
      .def_static(
          "from_file",
          [](const std::string& path) {
            std::ifstream in(path, std::ios::binary);
            if (!in) throw IoError("cannot open neuron file " + path);
            std::ostringstream text;
            text << in.rdbuf();
            return Neuron::parse(text.str(), path);
          },
          nb::arg("path"), "A neuron from a file in the neuron language.")
      .def("with_settings", &with_settings, nb::arg("settings"),
           "A copy with settings applied (as Neuron.builtin takes them).")
      .def_prop_ro("name", &Neuron::name)
      .def_prop_ro("inputs", &Neuron::inputs)
      .def_prop_ro("states", &Neuron::states)
      .def_prop_ro("outputs", &Neuron::outputs)
      .def_prop_ro(
          "params",
          [](const Neuron& n) {
            nb::list list;
            for (const NeuronParamInfo& p : n.params()) list.append(param_info(p));
            return list;
          },
          "Parameters as dicts: name, value, learnable, per_neuron.")
      .def(
          "initial_state_value",
          [](const Neuron& n, const std::string& s) { return n.initial_state_value(s); },
          nb::arg("state"))
      .def_prop_ro("source", &Neuron::source, "The canonical neuron-language text.")
      .def_prop_ro("forward_program", &Neuron::forward_program, "The lowered step body.")
      .def_prop_ro("backward_program", &Neuron::backward_program, "The derived backward step body.")
      .def_prop_ro("residual_plan", &Neuron::residual_plan,
                   "The values training_forward stores per neuron-step.")
      .def(
          "cuda_source",
          [](const Neuron& n, const std::string& kind) { return n.cuda_source(kind_from(kind)); },
          nb::arg("kind"))
      .def(
          "cpu_program",
          [](const Neuron& n, const std::string& kind) { return n.cpu_program(kind_from(kind)); },
          nb::arg("kind"));
}

// forward and backward with dicts by name.
void bind_calls(nb::class_<Neuron>& neuron) {
  neuron
      .def(
          "forward",
          [](const Neuron& n, const std::string& kind, nb::handle inputs, nb::handle initial_states,
             nb::handle params, nb::handle storage, nb::handle stream) {
            const NeuronKernelKind k = kind_from(kind);
            if (k == NeuronKernelKind::backward)
              throw nb::value_error("forward: kind 'backward' is Neuron.backward");
            const NamedArrays in = inputs_from(n, inputs);
            const NamedArrays states = named_arrays_from(initial_states, "initial_states");
            const NamedArrays values = named_arrays_from(params, "params");
            const NeuronStorage s = storage_from(storage);
            return on_stream(stream, in,
                             [&] { return neuron_forward(n, k, in, states, values, s); });
          },
          nb::arg("kind"), nb::arg("inputs"), nb::arg("initial_states") = nb::none(),
          nb::arg("params") = nb::none(), nb::arg("storage") = nb::none(), nb::kw_only(),
          nb::arg("stream") = nb::none(),
          "Runs kind 'inference', 'inference_final_state' or 'training_forward' over inputs\n"
          "(an array for a one-input neuron, else a dict by name; [T, *shape] with T at\n"
          "storage.time_axis). initial_states and params are dicts ([*shape], or scalars for\n"
          "params); storage a NeuronStorage or a dict of its fields; stream a cudaStream_t (an\n"
          "int, e.g. torch.cuda.current_stream().cuda_stream) to run on.")
      .def(
          "backward",
          [](const Neuron& n, const Residuals& residuals, nb::handle grad_outputs,
             nb::handle grad_state_sequences, nb::handle grad_final_states, nb::handle stream) {
            NamedArrays go = nb::isinstance<nb::dict>(grad_outputs)
                                 ? named_arrays_from(grad_outputs, "grad_outputs")
                                 : NamedArrays{};
            if (!nb::isinstance<nb::dict>(grad_outputs) && !grad_outputs.is_none()) {
              if (n.outputs().size() != 1)
                throw nb::value_error("backward: pass grad_outputs as a dict by output name");
              go[n.outputs()[0]] = to_array(grad_outputs);
            }
            const NamedArrays gs = named_arrays_from(grad_state_sequences, "grad_state_sequences");
            const NamedArrays gf = named_arrays_from(grad_final_states, "grad_final_states");
            const NamedArrays& like = !go.empty() ? go : !gs.empty() ? gs : gf;
            return on_stream(stream, like,
                             [&] { return neuron_backward(n, *residuals.residuals, go, gs, gf); });
          },
          nb::arg("residuals"), nb::arg("grad_outputs"),
          nb::arg("grad_state_sequences") = nb::none(), nb::arg("grad_final_states") = nb::none(),
          nb::kw_only(), nb::arg("stream") = nb::none(),
          "The backward kernel over a training_forward's residuals: gradients by name of the\n"
          "output sequences (an array for a one-output neuron), of state sequences and of final\n"
          "states (absent ones are zero). Returns NeuronGradients.");
}

// The per-call entry points of flexkit.torch: arrays (or DLPack capsules) in the neuron's own
// orders, lists out, so that a module call builds no dicts.
void bind_torch_fast_paths(nb::class_<Neuron>& neuron) {
  neuron
      .def(
          "_forward_lists",
          [](const Neuron& n, const std::string& kind, nb::list inputs, nb::list state_names,
             nb::list states, nb::list param_names, nb::list params, const NeuronStorage& storage,
             nb::handle stream) {
            NamedArrays in, initial, values;
            for (std::size_t i = 0; i < n.inputs().size(); ++i)
              in.emplace(n.inputs()[i], import_or_array(inputs[i]));
            for (std::size_t i = 0; i < nb::len(state_names); ++i)
              initial.emplace(nb::cast<std::string>(state_names[i]), import_or_array(states[i]));
            for (std::size_t i = 0; i < nb::len(param_names); ++i)
              values.emplace(nb::cast<std::string>(param_names[i]), import_or_array(params[i]));
            const NeuronForward f = on_stream(stream, in, [&] {
              return neuron_forward(n, kind_from(kind), in, initial, values, storage);
            });
            nb::list outputs, finals;
            for (const std::string& name : n.outputs()) outputs.append(f.outputs.at(name));
            for (const std::string& name : n.states()) finals.append(f.final_states.at(name));
            nb::object residuals = f.residuals ? nb::cast(Residuals{f.residuals}) : nb::none();
            return nb::make_tuple(outputs, finals, residuals);
          },
          nb::arg("kind"), nb::arg("inputs"), nb::arg("state_names"), nb::arg("states"),
          nb::arg("param_names"), nb::arg("params"), nb::arg("storage"), nb::arg("stream").none())
      .def(
          "_backward_lists",
          [](const Neuron& n, const Residuals& residuals, nb::list grad_outputs,
             nb::list grad_finals, nb::list state_names, nb::list param_names, nb::handle stream) {
            NamedArrays go, gf;
            for (std::size_t i = 0; i < n.outputs().size(); ++i)
              if (!grad_outputs[i].is_none())
                go.emplace(n.outputs()[i], import_or_array(grad_outputs[i]));
            for (std::size_t i = 0; i < n.states().size(); ++i)
              if (!grad_finals[i].is_none())
                gf.emplace(n.states()[i], import_or_array(grad_finals[i]));
            const NamedArrays& like = !go.empty() ? go : gf;
            const NeuronGradients g = on_stream(
                stream, like, [&] { return neuron_backward(n, *residuals.residuals, go, {}, gf); });
            nb::list inputs, states, params;
            for (const std::string& name : n.inputs()) inputs.append(g.inputs.at(name));
            for (nb::handle name : state_names) {
              auto it = g.initial_states.find(nb::cast<std::string>(name));
              states.append(it == g.initial_states.end() ? nb::none() : nb::cast(it->second));
            }
            for (nb::handle name : param_names) {
              auto it = g.params.find(nb::cast<std::string>(name));
              params.append(it == g.params.end() ? nb::none() : nb::cast(it->second));
            }
            return nb::make_tuple(inputs, states, params);
          },
          nb::arg("residuals"), nb::arg("grad_outputs"), nb::arg("grad_finals"),
          nb::arg("state_names"), nb::arg("param_names"), nb::arg("stream").none());
}

}  // namespace

void bind_neuron(nb::module_& m) {
  bind_storage_and_results(m);
  nb::class_<Neuron> neuron(
      m, "Neuron",
      "A spiking neuron compiled into fused multi-step kernels: a single-step body\n"
      "in the neuron language (or a built-in) with its fixed parameters bound.\n"
      "A call runs all T steps in one kernel with the state in registers.\n\n"
      "    lif = fk.Neuron.builtin('lif', tau=2.0, v_reset=None)\n"
      "    f = lif.forward('training_forward', x)       # x: [T, *shape]\n"
      "    g = lif.backward(f.residuals, {'s': grad_s})  # g.inputs['x']\n\n"
      "Built-ins: if, lif, plif, alif, izhikevich, eif, qif. Settings use\n"
      "SpikingJelly's names: v_reset=None is the soft reset, decay_input=False,\n"
      "detach_reset=True, surrogate='atan(2)', init_tau (plif).");
  bind_construction_and_introspection(neuron);
  bind_calls(neuron);
  bind_torch_fast_paths(neuron);
  neuron
      .def("__repr__", [](const Neuron& n) { return "flexkit.Neuron('" + n.name() + "')"; })
      // Pickled as its canonical source, which holds every bound value: copy.deepcopy and
      // torch.save of a module holding a neuron work.
      .def("__getstate__", [](const Neuron& n) { return n.source(); })
      .def("__setstate__", [](Neuron* n, const std::string& source) {
        new (n) Neuron(Neuron::parse(source, "<pickle>"));
      });
}

}  // namespace flexkit::python
