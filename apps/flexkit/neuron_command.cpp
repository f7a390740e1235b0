// flexkit neuron: inspect a neuron's generated code, and run it over .npy sequences.
//
//   flexkit neuron show <neuron> [--set NAME=VALUE]...
//   flexkit neuron run <neuron> [--set NAME=VALUE]... --in NAME=FILE.npy...
//       [--grad NAME=FILE.npy]... --out DIR [--device cpu|cuda[:N]] [--dtype f32|bf16|flex16]
//
// Exit codes: 0 success, 1 a failure inside the library (its message is printed), 2 a mistake in
// the command line. Errors are one line on stderr, prefixed "flexkit neuron: ".
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "commands.hpp"
#include "flexkit/flexkit.hpp"
#include "flexkit/neuron.hpp"

namespace flexkit::cli {

namespace {

namespace fs = std::filesystem;

constexpr const char* kUsage =
    "usage: flexkit neuron show <neuron> [--set NAME=VALUE]...\n"
    "       flexkit neuron run <neuron> [--set NAME=VALUE]... --in NAME=FILE.npy...\n"
    "                          [--grad NAME=FILE.npy]... --out DIR\n"
    "                          [--device cpu|cuda[:N]] [--dtype f32|bf16|flex16]\n"
    "\n"
    "<neuron> is a built-in (if, lif, plif, alif, izhikevich, eif, qif) or a file in the\n"
    "neuron language.\n";

constexpr const char* kShowHelp =
    "usage: flexkit neuron show <neuron> [--set NAME=VALUE]...\n"
    "\n"
    "Prints the neuron's canonical source, its forward and derived backward step bodies, the\n"
    "residual plan (the values training stores per neuron-step) and, for each kernel kind, the\n"
    "generated CUDA source and CPU program.\n"
    "\n"
    "  --set NAME=VALUE  bind a parameter (a number) or a SpikingJelly-style setting:\n"
    "                    v_reset=none (soft reset), decay_input / detach_reset = true|false,\n"
    "                    surrogate=NAME[(alpha)], PLIF's init_tau; applied in order\n";

constexpr const char* kRunHelp =
    "usage: flexkit neuron run <neuron> [--set NAME=VALUE]... --in NAME=FILE.npy...\n"
    "                          [--grad NAME=FILE.npy]... --out DIR\n"
    "                          [--device cpu|cuda[:N]] [--dtype f32|bf16|flex16]\n"
    "\n"
    "Runs all T steps of the neuron in one kernel call.\n"
    "\n"
    "  --set NAME=VALUE      as for `flexkit neuron show`\n"
    "  --in NAME=FILE.npy    every input sequence [T, ...] by its name (required); an initial\n"
    "                        state [...] by the state's name (absent states start at their\n"
    "                        init value); a learnable or per-neuron parameter's value\n"
    "  --grad NAME=FILE.npy  dL/d(output sequence) by the output's name, dL/d(state sequence)\n"
    "                        by the state's name, dL/d(final state) as <state>_final; any\n"
    "                        --grad runs the training forward and the backward kernel\n"
    "  --out DIR             receives <output>.npy, <state>.npy (sequences), <state>_final.npy\n"
    "                        and, with a backward, grad_<input>.npy, grad_<state>0.npy and\n"
    "                        grad_<param>.npy (learnable parameters). Created if absent; files\n"
    "                        appear only when the whole run succeeded; other files are kept\n"
    "  --device D            cpu (default) or cuda[:N]\n"
    "  --dtype T             how sequences and residuals are stored: f32 (default), bf16 or\n"
    "                        flex16. Input sequences are converted to it (float64 files are\n"
    "                        accepted; u8 spike inputs are kept as u8); initial states,\n"
    "                        parameters and gradients are converted to f32. Every result is\n"
    "                        written as float32.\n";

// A mistake in the command line (exit status 2), as opposed to a failure inside the library.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// ---- argument parsing ----------------------------------------------------------------------

// The parsed command line of `show` and `run`.
struct Options {
  std::string neuron;
  std::vector<std::pair<std::string, std::string>> settings;  // --set, in order
  std::vector<std::pair<std::string, std::string>> ins;       // --in
  std::vector<std::pair<std::string, std::string>> grads;     // --grad
  std::optional<std::string> out;
  std::optional<std::string> device;
  std::optional<std::string> dtype;
  bool help = false;
};

// Splits "NAME=VALUE" at the first '='; both sides must be non-empty.
std::pair<std::string, std::string> split_assignment(std::string_view option,
                                                     std::string_view text) {
  const auto eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0 || eq + 1 == text.size())
    throw UsageError(std::string(option) +
                     " expects NAME=" + (option == "--set" ? "VALUE" : "FILE.npy") + ", got '" +
                     std::string(text) + "'");
  return {std::string(text.substr(0, eq)), std::string(text.substr(eq + 1))};
}

// Options take their value as the next argument or after '=' ("--out DIR", "--out=DIR").
Options parse_options(const Args& args, bool is_run) {
  Options o;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") {
      o.help = true;
      continue;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      if (!o.neuron.empty()) throw UsageError("unexpected argument '" + arg + "'");
      o.neuron = arg;
      continue;
    }
    std::string name = arg;
    std::optional<std::string> value;
    if (const auto eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    }
    const bool known =
        name == "--set" || (is_run && (name == "--in" || name == "--grad" || name == "--out" ||
                                       name == "--device" || name == "--dtype"));
    if (!known)
      throw UsageError("unknown option '" + name + "' for 'flexkit neuron " +
                       (is_run ? "run" : "show") + "'");
    if (!value) {
      if (i + 1 == args.size()) throw UsageError(name + " needs a value");
      value = args[++i];
    }
    auto single = [&](std::optional<std::string>& slot) {
      if (slot) throw UsageError(name + " given twice");
      if (value->empty()) throw UsageError(name + " needs a value");
      slot = *value;
    };
    if (name == "--set")
      o.settings.push_back(split_assignment(name, *value));
    else if (name == "--in")
      o.ins.push_back(split_assignment(name, *value));
    else if (name == "--grad")
      o.grads.push_back(split_assignment(name, *value));
    else if (name == "--out")
      single(o.out);
    else if (name == "--device")
      single(o.device);
    else
      single(o.dtype);
  }
  if (o.help) return o;
  if (o.neuron.empty()) throw UsageError("missing <neuron> (a built-in name or a neuron file)");
  if (is_run && !o.out) throw UsageError("missing --out DIR");
  return o;
}

// ---- the neuron ----------------------------------------------------------------------------

std::string join(const std::vector<std::string>& names) {
  if (names.empty()) return "none";
  std::string text;
  for (const std::string& n : names) text += (text.empty() ? "" : ", ") + n;
  return text;
}

bool contains(const std::vector<std::string>& names, std::string_view name) {
  for (const std::string& n : names)
    if (n == name) return true;
  return false;
}

Neuron load_neuron(const Options& o) {
  Neuron neuron = Neuron::named_or_file(o.neuron);
  for (const auto& [name, value] : o.settings) {
    // A setting the neuron does not have is a mistake in the command line, though only the
    // library knows which settings a neuron accepts.
    try {
      neuron = neuron.with_setting(name, value);
    } catch (const std::invalid_argument& e) {  // NeuronError, ValueError: a bad name or value
      throw UsageError("--set " + name + "=" + value + ": " + e.what());
    }
  }
  return neuron;
}

std::string describe_interface(const Neuron& neuron) {
  std::string text =
      "neuron " + neuron.name() + "\n  inputs:  " + join(neuron.inputs()) + "\n  states:  ";
  if (neuron.states().empty()) text += "none";
  for (std::size_t i = 0; i < neuron.states().size(); ++i) {
    const std::string& s = neuron.states()[i];
    char init[64];
    std::snprintf(init, sizeof init, "%.9g", neuron.initial_state_value(s));
    text += (i ? ", " : "") + s + " (starts at " + init + ")";
  }
  text += "\n  outputs: " + join(neuron.outputs()) + "\n  parameters:";
  const auto params = neuron.params();
  if (params.empty()) text += " none";
  for (const NeuronParamInfo& p : params) {
    char value[64];
    std::snprintf(value, sizeof value, "%.9g", p.value);
    text += "\n    " + p.name + " = " + value;
    if (p.learnable) text += " learnable";
    if (p.per_neuron) text += " per-neuron";
    if (!p.learnable && !p.per_neuron) text += " fixed";
  }
  return text + "\n";
}

void section(const std::string& title, const std::string& body) {
  std::printf("==== %s ====\n%s", title.c_str(), body.c_str());
  if (body.empty() || body.back() != '\n') std::printf("\n");
  std::printf("\n");
}

int show(const Options& o) {
  const Neuron neuron = load_neuron(o);
  section("interface", describe_interface(neuron));
  section("neuron source", neuron.source());
  section("forward program", neuron.forward_program());
  section("backward program", neuron.backward_program());
  const std::vector<std::string> plan = neuron.residual_plan();
  std::string listing;
  for (const std::string& value : plan) listing += "  " + value + "\n";
  section("residual plan: " + std::to_string(plan.size()) + " value" +
              (plan.size() == 1 ? "" : "s") + " stored per neuron-step",
          plan.empty() ? "  (nothing stored)\n" : listing);
  for (NeuronKernelKind kind :
       {NeuronKernelKind::inference, NeuronKernelKind::inference_final_state,
        NeuronKernelKind::training_forward, NeuronKernelKind::backward}) {
    const std::string k(to_string(kind));
    section(k + " kernel: CUDA source", neuron.cuda_source(kind));
    section(k + " kernel: CPU program", neuron.cpu_program(kind));
  }
  return 0;
}

// ---- run -----------------------------------------------------------------------------------

// A host array of `dtype` holding `a`'s values (the same array when it already is one).
Array converted(const Array& a, DType dtype) {
  Array host = a.device().is_cpu() ? a : a.copy_to(Device::cpu());
  if (host.dtype() == dtype) return host;
  const std::vector<float> values = host.to_floats();
  return Array::from_floats(values, host.shape(), dtype);
}

// The files of a run's result, by file name, all f32 on the host.
using Results = std::map<std::string, Array>;

void add_results(Results& results, const NamedArrays& arrays, const std::string& prefix,
                 const std::string& suffix) {
  for (const auto& [name, array] : arrays) {
    const std::string file = prefix + name + suffix + ".npy";
    if (!results.emplace(file, converted(array, DType::f32)).second)
      throw std::runtime_error("two results would both be written to " + file);
  }
}

// A fresh, empty directory beside `target`, removed again unless released.
class StagingDirectory {
 public:
  explicit StagingDirectory(const fs::path& target) {
    std::random_device entropy;
    std::mt19937_64 random(
        (static_cast<std::uint64_t>(entropy()) << 32) ^ entropy() ^
        static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
    // A hidden name that says which directory it is filling.
    std::string stem = ".";
    stem += target.filename().string();
    stem += ".partial-";
    for (int attempt = 0; attempt < 100; ++attempt) {
      char tag[32];
      std::snprintf(tag, sizeof tag, "%016llx", static_cast<unsigned long long>(random()));
      const fs::path candidate = target.parent_path() / (stem + tag);
      if (fs::create_directory(candidate)) {
        path_ = candidate;
        return;
      }
    }
    throw std::runtime_error("cannot create a temporary directory beside " + target.string());
  }
  StagingDirectory(const StagingDirectory&) = delete;
  StagingDirectory& operator=(const StagingDirectory&) = delete;
  ~StagingDirectory() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Writes every result beside `dir` first, then moves the complete set into it: a failure
// leaves `dir` as it was.
void write_results(const Results& results, const fs::path& dir) {
  fs::path target = fs::absolute(dir).lexically_normal();
  if (!target.has_filename()) target = target.parent_path();  // "out/" names "out"
  fs::create_directories(target.parent_path());
  StagingDirectory staging(target);
  for (const auto& [file, array] : results) save_npy(staging.path() / file, array);
  fs::create_directories(target);
  // Renaming a file over a directory fails; finding that out halfway would leave a partial set.
  for (const auto& entry : results)
    if (fs::is_directory(target / entry.first))
      throw std::runtime_error("cannot write " + (target / entry.first).string() +
                               ": a directory of that name exists");
  for (const auto& [file, array] : results) fs::rename(staging.path() / file, target / file);
}

DType parse_compute_dtype(const std::optional<std::string>& text) {
  if (!text) return DType::f32;
  if (*text == "f32" || *text == "float32") return DType::f32;
  if (*text == "bf16" || *text == "bfloat16") return DType::bf16;
  if (*text == "flex16") return DType::flex16;
  throw UsageError("--dtype must be f32, bf16 or flex16, got '" + *text + "'");
}

Device parse_device(const std::optional<std::string>& text) {
  if (!text) return Device::cpu();
  try {
    return Device::parse(*text);
  } catch (const DeviceError&) {
    throw UsageError("--device must be cpu or cuda[:N], got '" + *text + "'");
  }
}

std::string shape_text(const Shape& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

int run(const Options& o) {
  const DType dtype = parse_compute_dtype(o.dtype);
  const Device device = parse_device(o.device);
  const fs::path out_dir = *o.out;
  if (fs::exists(out_dir) && !fs::is_directory(out_dir))
    throw UsageError("--out " + out_dir.string() + " exists and is not a directory");

  const Neuron neuron = load_neuron(o);
  std::map<std::string, NeuronParamInfo> params;
  for (const NeuronParamInfo& p : neuron.params()) params.emplace(p.name, p);

  // Classify every --in by name before reading any file.
  enum class Role { input, state, param };
  std::vector<std::pair<Role, std::pair<std::string, std::string>>> ins;
  std::set<std::string> seen;
  for (const auto& in : o.ins) {
    const std::string& name = in.first;
    if (!seen.insert(name).second) throw UsageError("--in " + name + " given twice");
    Role role;
    if (contains(neuron.inputs(), name)) {
      role = Role::input;
    } else if (contains(neuron.states(), name)) {
      role = Role::state;
    } else if (auto p = params.find(name); p != params.end()) {
      if (!p->second.learnable && !p->second.per_neuron)
        throw UsageError("--in " + name + ": '" + name + "' is a fixed parameter of neuron " +
                         neuron.name() + "; bind it with --set " + name + "=VALUE");
      role = Role::param;
    } else {
      throw UsageError("--in " + name + ": neuron " + neuron.name() + " has no input, state or " +
                       "parameter '" + name + "' (inputs: " + join(neuron.inputs()) +
                       "; states: " + join(neuron.states()) + ")");
    }
    ins.push_back({role, in});
  }
  for (const std::string& input : neuron.inputs())
    if (!seen.count(input))
      throw UsageError("missing --in " + input + "=FILE.npy (input sequence of neuron " +
                       neuron.name() + ")");

  // Classify every --grad: an output, a state sequence, or a final state.
  enum class GradRole { output, state_sequence, final_state };
  std::vector<std::pair<GradRole, std::pair<std::string, std::string>>> grads;
  std::set<std::string> grad_seen;
  for (const auto& g : o.grads) {
    const std::string& name = g.first;
    if (!grad_seen.insert(name).second) throw UsageError("--grad " + name + " given twice");
    constexpr std::string_view kFinal = "_final";
    if (contains(neuron.outputs(), name)) {
      grads.push_back({GradRole::output, g});
    } else if (contains(neuron.states(), name)) {
      grads.push_back({GradRole::state_sequence, g});
    } else if (name.size() > kFinal.size() && name.ends_with(kFinal) &&
               contains(neuron.states(), name.substr(0, name.size() - kFinal.size()))) {
      grads.push_back(
          {GradRole::final_state, {name.substr(0, name.size() - kFinal.size()), g.second}});
    } else {
      throw UsageError("--grad " + name + ": neuron " + neuron.name() +
                       " has no output, state or final state '" + name + "' (outputs: " +
                       join(neuron.outputs()) + "; states: " + join(neuron.states()) +
                       "; final states are named <state>_final)");
    }
  }
  const bool backward = !grads.empty();

  // Read every file (on the host, converted, then moved to the device).
  auto load = [&](const std::string& file, DType to) {
    Array a = load_npy(file);
    if (a.dtype() != DType::u8 || to != dtype) a = converted(a, to);
    return device.is_cpu() ? a : a.copy_to(device);
  };
  NamedArrays inputs, initial_states, param_values;
  for (const auto& [role, in] : ins) {
    const auto& [name, file] = in;
    if (role == Role::input)
      inputs.emplace(name, load(file, dtype));
    else
      (role == Role::state ? initial_states : param_values).emplace(name, load(file, DType::f32));
  }
  NamedArrays grad_outputs, grad_sequences, grad_finals;
  for (const auto& [role, g] : grads) {
    NamedArrays& into = role == GradRole::output           ? grad_outputs
                        : role == GradRole::state_sequence ? grad_sequences
                                                           : grad_finals;
    into.emplace(g.first, load(g.second, DType::f32));
  }

  NeuronStorage storage;
  storage.sequence_dtype = dtype;
  storage.residual_dtype = dtype;
  storage.keep_state_sequences = backward;

  const auto start = std::chrono::steady_clock::now();
  const NeuronKernelKind kind =
      backward ? NeuronKernelKind::training_forward : NeuronKernelKind::inference;
  NeuronForward forward =
      neuron_forward(neuron, kind, inputs, initial_states, param_values, storage);
  Results results;
  add_results(results, forward.outputs, "", "");
  add_results(results, forward.state_sequences, "", "");
  add_results(results, forward.final_states, "", "_final");
  if (backward) {
    if (!forward.residuals)
      throw std::runtime_error("the training forward returned no residuals for backward");
    NeuronGradients g =
        neuron_backward(neuron, *forward.residuals, grad_outputs, grad_sequences, grad_finals);
    add_results(results, g.inputs, "grad_", "");
    add_results(results, g.initial_states, "grad_", "0");
    add_results(results, g.params, "grad_", "");
  }
  // The results are on the host by now, so the time covers all device work.
  const double elapsed_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

  write_results(results, out_dir);

  const Shape& x_shape = inputs.at(neuron.inputs().front()).shape();
  const Shape neuron_shape(x_shape.begin() + (x_shape.empty() ? 0 : 1), x_shape.end());
  const auto count = static_cast<long long>(shape_numel(neuron_shape));
  std::printf("neuron %s: T = %lld, shape %s (%lld neuron%s), device %s, dtype %.*s, %s\n",
              neuron.name().c_str(), static_cast<long long>(x_shape.empty() ? 0 : x_shape[0]),
              shape_text(neuron_shape).c_str(), count, count == 1 ? "" : "s", device.str().c_str(),
              static_cast<int>(dtype_name(dtype).size()), dtype_name(dtype).data(),
              backward ? "training forward + backward" : "inference");
  std::printf("elapsed %.3f ms (including any kernel compilation)\n", elapsed_ms);
  std::printf("wrote %zu files to %s:", results.size(), out_dir.string().c_str());
  for (const auto& entry : results) std::printf(" %s", entry.first.c_str());
  std::printf("\n");
  return 0;
}

}  // namespace

int neuron_command(const Args& args) {
  try {
    if (args.empty()) {
      std::fputs(kUsage, stderr);
      return 2;
    }
    const std::string& sub = args.front();
    if (sub == "--help" || sub == "-h" || sub == "help") {
      std::fputs(kUsage, stdout);
      std::printf("\n'flexkit neuron show --help' and 'flexkit neuron run --help' say more.\n");
      return 0;
    }
    if (sub != "show" && sub != "run")
      throw UsageError("unknown subcommand '" + sub + "' (expected show or run)");
    const bool is_run = sub == "run";
    const Options o = parse_options(Args(args.begin() + 1, args.end()), is_run);
    if (o.help) {
      std::fputs(is_run ? kRunHelp : kShowHelp, stdout);
      return 0;
    }
    return is_run ? run(o) : show(o);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "flexkit neuron: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flexkit neuron: %s\n", e.what());
    return 1;
  }
}

}  // namespace flexkit::cli
