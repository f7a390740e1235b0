// flexkit neuron: inspect a neuron's generated code, and run it over .npy sequences.
//
//   flexkit neuron show <neuron> [--set NAME=VALUE]... [--section NAME]...
//   flexkit neuron run <neuron> [--set NAME=VALUE]... --in NAME=FILE.npy...
//       [--grad NAME=FILE.npy]... --out DIR [--device cpu|cuda[:N]] [--dtype f32|bf16|flex16]
//       [--check-finite | --allow-nonfinite]
//
// CLI11 parses the command line. Exit codes: 0 success (and --help), 1 a failure inside the
// library (its message is printed), 2 a mistake in the command line. Errors are one line on
// stderr, prefixed "flexkit neuron: "; warnings too, prefixed "flexkit neuron: warning: ".
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
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
#include "flexkit/neuron_language.hpp"

namespace flexkit::cli {

namespace {

namespace fs = std::filesystem;

constexpr const char* kShowUsage =
    "usage: flexkit neuron show <neuron> [--set NAME=VALUE]... [--section NAME]...\n";
constexpr const char* kRunUsage =
    "usage: flexkit neuron run <neuron> [--set NAME=VALUE]... --in NAME=FILE.npy...\n"
    "                          [--grad NAME=FILE.npy]... --out DIR\n"
    "                          [--device cpu|cuda[:N]] [--dtype f32|bf16|flex16]\n"
    "                          [--check-finite | --allow-nonfinite]\n";

constexpr const char* kUsage =
    "usage: flexkit neuron show <neuron> [--set NAME=VALUE]... [--section NAME]...\n"
    "       flexkit neuron run <neuron> [--set NAME=VALUE]... --in NAME=FILE.npy...\n"
    "                          [--grad NAME=FILE.npy]... --out DIR\n"
    "                          [--device cpu|cuda[:N]] [--dtype f32|bf16|flex16]\n"
    "                          [--check-finite | --allow-nonfinite]\n"
    "\n"
    "<neuron> is a built-in (if, lif, plif, alif, izhikevich, eif, qif) or a file in the\n"
    "neuron language; a name with a '/' (./lif) always means the file.\n";

constexpr const char* kTopFooter =
    "'flexkit neuron show --help' and 'flexkit neuron run --help' say more.\n"
    "Exit codes: 0 success, 1 a failure inside the library, 2 a mistake in the command line.";

constexpr const char* kShowFooter =
    "Prints the neuron's interface, its canonical source, its forward and derived backward step\n"
    "bodies, the residual plan (the values training stores per neuron-step) and, for each kernel\n"
    "kind, the generated CUDA source and CPU program; --section picks some of these.";

constexpr const char* kRunFooter =
    "Runs all T steps of the neuron in one kernel call. Every result is written as float32.\n"
    "Input sequences are converted to --dtype (float64 files are accepted; u8 spike inputs are\n"
    "kept as u8); initial states, parameters and gradients are converted to f32.\n"
    "With --dtype flex16 the sequences (outputs, states, residuals) are stored with the exponent\n"
    "--iwl-policy gives them: fixed, --iwl for all (default 4, |x| < 16); exact, for each the\n"
    "smallest that holds its values, measured by a float32 pass first; autoflex, what each\n"
    "sequence's exponent manager predicts (a single run is its first write, so exact). Values\n"
    "beyond the range saturate; each result that saturated is reported on stderr.";

constexpr const char* kSetHelp =
    "bind a parameter (a number) or a SpikingJelly-style setting: v_reset=none (soft reset), "
    "decay_input / detach_reset = true|false, surrogate=NAME[(alpha)], PLIF's init_tau; applied "
    "in order. A built-in's parameters are checked against their domain (tau > 0, ...)";

// The sections of `show`, in the order it prints them.
const std::vector<std::string> kSections = {"interface", "source", "forward", "backward",
                                            "residuals", "cuda",   "cpu"};

// A mistake in the command line (exit status 2), as opposed to a failure inside the library.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// ---- argument parsing ----------------------------------------------------------------------

// CLI11's help, with the usage lines this command documents in place of the generated one.
class Formatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App* app, std::string) const override {
    if (app->get_name() == "show") return std::string(kShowUsage) + "\n";
    if (app->get_name() == "run") return std::string(kRunUsage) + "\n";
    return std::string(kUsage) + "\n";
  }
};

// The parsed command line of `show` and `run`.
struct Options {
  std::string neuron;
  std::vector<std::pair<std::string, std::string>> settings;  // --set, in order
  std::vector<std::pair<std::string, std::string>> ins;       // --in
  std::vector<std::pair<std::string, std::string>> grads;     // --grad
  std::optional<std::string> out;
  std::optional<std::string> device;
  std::optional<std::string> dtype;
  std::vector<std::string> sections;  // show --section; empty: all
  bool check_finite = true;
  std::optional<int> iwl;            // --iwl: the flex16 sequences' exponent
  std::string iwl_policy = "fixed";  // --iwl-policy fixed|exact|autoflex
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

std::vector<std::pair<std::string, std::string>> split_all(std::string_view option,
                                                           const std::vector<std::string>& all) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& text : all) out.push_back(split_assignment(option, text));
  return out;
}

// A repeatable option: each occurrence takes one value ("--in a=x.npy --in b=y.npy").
CLI::Option* repeatable(CLI::App* app, const std::string& name, std::vector<std::string>& into,
                        const std::string& type, const std::string& help) {
  return app->add_option(name, into, help)
      ->type_name(type)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
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

bool is_builtin_name(const std::string& name) {
  return contains(builtin_neuron_names(), name);
}

Neuron load_neuron(const Options& o) {
  // A bare built-in name means the built-in even when a file of that name is here; a name
  // with a '/' never matches a built-in, so it always means the file.
  const bool builtin = is_builtin_name(o.neuron);
  if (builtin) {
    std::error_code ignored;
    if (fs::exists(o.neuron, ignored))
      std::fprintf(stderr,
                   "flexkit neuron: warning: '%s' is a built-in neuron; the file ./%s is ignored "
                   "\u2014 write ./%s to use the file\n",
                   o.neuron.c_str(), o.neuron.c_str(), o.neuron.c_str());
  }
  Neuron neuron = Neuron::named_or_file(o.neuron);
  for (const auto& [name, value] : o.settings) {
    // A setting the neuron does not have is a mistake in the command line, though only the
    // library knows which settings a neuron accepts.
    try {
      neuron = neuron.with_setting(name, value);
      if (builtin)
        for (const NeuronParamInfo& p : neuron.params())
          check_builtin_parameter(o.neuron, p.name, p.value);
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
  for (const std::string& name : o.sections)
    if (!contains(kSections, name))
      throw UsageError("--section: unknown section '" + name + "'; sections: " + join(kSections));
  auto wanted = [&](std::string_view name) {
    return o.sections.empty() || contains(o.sections, name);
  };
  const Neuron neuron = load_neuron(o);
  if (wanted("interface")) section("interface", describe_interface(neuron));
  if (wanted("source")) section("neuron source", neuron.source());
  if (wanted("forward")) section("forward program", neuron.forward_program());
  if (wanted("backward")) section("backward program", neuron.backward_program());
  if (wanted("residuals")) {
    const std::vector<std::string> plan = neuron.residual_plan();
    std::string listing;
    for (const std::string& value : plan) listing += "  " + value + "\n";
    section("residual plan: " + std::to_string(plan.size()) + " value" +
                (plan.size() == 1 ? "" : "s") + " stored per neuron-step",
            plan.empty() ? "  (nothing stored)\n" : listing);
  }
  for (NeuronKernelKind kind :
       {NeuronKernelKind::inference, NeuronKernelKind::inference_final_state,
        NeuronKernelKind::training_forward, NeuronKernelKind::backward}) {
    const std::string k(to_string(kind));
    // Without the CUDA backend there is no CUDA source: left out of the default listing, an
    // error when asked for.
    if (wanted("cuda") && (cuda::built_with_cuda() || !o.sections.empty()))
      section(k + " kernel: CUDA source", neuron.cuda_source(kind));
    if (wanted("cpu")) section(k + " kernel: CPU program", neuron.cpu_program(kind));
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

// A fresh, empty, hidden directory inside `target`, removed again when it goes out of scope.
// Inside, so that moving its files into `target` never crosses file systems (`target` may be a
// mount point).
class StagingDirectory {
 public:
  explicit StagingDirectory(const fs::path& target) {
    std::random_device entropy;
    std::mt19937_64 random(
        (static_cast<std::uint64_t>(entropy()) << 32) ^ entropy() ^
        static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
    for (int attempt = 0; attempt < 100; ++attempt) {
      char tag[32];
      std::snprintf(tag, sizeof tag, "%016llx", static_cast<unsigned long long>(random()));
      const fs::path candidate = target / (std::string(".flexkit-staging-") + tag);
      if (fs::create_directory(candidate)) {
        path_ = candidate;
        return;
      }
    }
    throw std::runtime_error("cannot create a temporary directory in " + target.string());
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

// Writes every result into a staging directory inside `dir` first, then moves the complete set
// into `dir`: a failure leaves `dir` as it was (and removes it again when this call made it).
void write_results(const Results& results, const fs::path& dir) {
  fs::path target = fs::absolute(dir).lexically_normal();
  if (!target.has_filename()) target = target.parent_path();  // "out/" names "out"
  const bool created = fs::create_directories(target);
  try {
    StagingDirectory staging(target);
    for (const auto& [file, array] : results) save_npy(staging.path() / file, array);
    // Renaming a file over a directory fails; finding that out halfway would leave a partial
    // set.
    for (const auto& entry : results)
      if (fs::is_directory(target / entry.first))
        throw std::runtime_error("cannot write " + (target / entry.first).string() +
                                 ": a directory of that name exists");
    // The sidecars first (a flex16 file's .iwl, a bf16 file's .bf16): a reader that sees the
    // .npy then always finds its sidecar.
    for (const auto& [file, array] : results) {
      for (const fs::path& side :
           {flex16_sidecar_path(staging.path() / file), bf16_sidecar_path(staging.path() / file)})
        if (fs::exists(side)) fs::rename(side, target / side.filename());
      fs::rename(staging.path() / file, target / file);
    }
  } catch (...) {
    if (created) {
      std::error_code ignored;
      fs::remove(target, ignored);  // only while empty
    }
    throw;
  }
}

// How many of `a`'s values are NaN or infinite, and the index of the first.
struct NonFinite {
  std::size_t count = 0;
  std::string first;
};

std::string index_text(const Shape& shape, std::size_t flat) {
  std::vector<std::int64_t> index(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    const auto extent = static_cast<std::size_t>(shape[d]);
    index[d] = static_cast<std::int64_t>(flat % extent);
    flat /= extent;
  }
  std::string text = "[";
  for (std::size_t d = 0; d < index.size(); ++d) text += (d ? ", " : "") + std::to_string(index[d]);
  return text + "]";
}

NonFinite non_finite(const Array& a) {
  NonFinite found;
  if (a.dtype() != DType::f32 && a.dtype() != DType::f64 && a.dtype() != DType::bf16) return found;
  const Array host = a.device().is_cpu() ? a : a.copy_to(Device::cpu());
  const std::vector<float> values = host.to_floats();
  for (std::size_t i = 0; i < values.size(); ++i)
    if (!std::isfinite(values[i]) && found.count++ == 0) found.first = index_text(a.shape(), i);
  return found;
}

void warn_non_finite(const std::string& what, const Array& a) {
  const NonFinite found = non_finite(a);
  if (found.count == 0) return;
  std::fprintf(stderr,
               "flexkit neuron: warning: %s holds %zu non-finite value%s (first at index %s)\n",
               what.c_str(), found.count, found.count == 1 ? "" : "s", found.first.c_str());
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

IwlPolicy parse_iwl_policy(const std::string& text) {
  if (text == "exact") return IwlPolicy::exact;
  if (text == "autoflex") return IwlPolicy::autoflex;
  return IwlPolicy::fixed;
}

// "at iwl 7 (|x| < 128)" when every flex16 sequence has one exponent, else one per sequence.
std::string flex16_iwl_text(const std::vector<const NamedArrays*>& groups) {
  std::vector<std::pair<std::string, int>> iwls;
  for (const NamedArrays* arrays : groups)
    for (const auto& [name, a] : *arrays)
      if (a.dtype() == DType::flex16) iwls.emplace_back(name, a.iwl());
  auto range = [](int iwl) {
    char text[64];
    std::snprintf(text, sizeof text, "iwl %d (|x| < %g)", iwl, std::ldexp(1.0, iwl));
    return std::string(text);
  };
  bool one = true;
  for (const auto& entry : iwls) one &= entry.second == iwls.front().second;
  if (iwls.empty()) return "none";
  if (one) return "all at " + range(iwls.front().second);
  std::string text;
  for (const auto& [name, iwl] : iwls)
    text += (text.empty() ? "" : ", ") + name + " at " + range(iwl);
  return text;
}

// One stderr line per flex16 sequence that saturated: flex16 never fails, it clips.
void warn_saturated(const NamedArrays& arrays, const std::string& policy) {
  for (const auto& [name, a] : arrays) {
    if (a.dtype() != DType::flex16) continue;
    const Flex16Stats s = a.stats();
    if (s.saturated == 0) continue;
    std::fprintf(stderr,
                 "flexkit neuron: warning: the result %s.npy: %llu of %lld values saturated at "
                 "flex16 iwl %d (|x| < %g)%s\n",
                 name.c_str(), static_cast<unsigned long long>(s.saturated),
                 static_cast<long long>(a.size()), a.iwl(), std::ldexp(1.0, a.iwl()),
                 policy == "fixed" ? "; --iwl-policy exact or a larger --iwl holds them" : "");
  }
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

  // Read every file (on the host, converted, then moved to the device). `what` names the
  // argument as written, in warnings and in conversion errors (flex16 holds finite values only).
  auto load = [&](const std::string& what, const std::string& file, DType to) {
    Array a = load_npy(file);
    if (o.check_finite) warn_non_finite(what, a);
    try {
      if (a.dtype() != DType::u8 || to != dtype) a = converted(a, to);
    } catch (const std::exception& e) {
      throw std::runtime_error(what + ": " + e.what());
    }
    return device.is_cpu() ? a : a.copy_to(device);
  };
  NamedArrays inputs, initial_states, param_values;
  for (const auto& [role, in] : ins) {
    const auto& [name, file] = in;
    const std::string what = "--in " + name + "=" + file;
    if (role == Role::input)
      inputs.emplace(name, load(what, file, dtype));
    else
      (role == Role::state ? initial_states : param_values)
          .emplace(name, load(what, file, DType::f32));
  }
  // The shapes the gradients must have, checked here to name the argument as written.
  const Shape& seq_shape = inputs.at(neuron.inputs().front()).shape();
  const Shape step_shape(seq_shape.begin() + (seq_shape.empty() ? 0 : 1), seq_shape.end());
  NamedArrays grad_outputs, grad_sequences, grad_finals;
  for (std::size_t i = 0; i < grads.size(); ++i) {
    const auto& [role, g] = grads[i];
    const std::string what = "--grad " + o.grads[i].first + "=" + g.second;
    Array a = load(what, g.second, DType::f32);
    const bool final_state = role == GradRole::final_state;
    const Shape& expected = final_state ? step_shape : seq_shape;
    if (a.shape() != expected)
      throw ShapeError(
          what + " has shape " + shape_text(a.shape()) + ", expected " + shape_text(expected) +
          (final_state
               ? " (the neuron shape: --in " + neuron.inputs().front() + " without its time axis)"
               : " (the shape of --in " + neuron.inputs().front() + ")"));
    NamedArrays& into = role == GradRole::output           ? grad_outputs
                        : role == GradRole::state_sequence ? grad_sequences
                                                           : grad_finals;
    into.emplace(g.first, std::move(a));
  }

  NeuronStorage storage;
  storage.sequence_dtype = dtype;
  storage.residual_dtype = dtype;
  storage.keep_state_sequences = backward;

  const auto start = std::chrono::steady_clock::now();
  const NeuronKernelKind kind =
      backward ? NeuronKernelKind::training_forward : NeuronKernelKind::inference;
  if (dtype == DType::flex16) {
    storage.flex16_iwl = o.iwl.value_or(storage.flex16_iwl);
    storage.iwl_policy = parse_iwl_policy(o.iwl_policy);
  }
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

  if (dtype == DType::flex16) {
    warn_saturated(forward.outputs, o.iwl_policy);
    warn_saturated(forward.state_sequences, o.iwl_policy);
  }
  if (o.check_finite)
    for (const auto& [file, array] : results) warn_non_finite("the result " + file, array);
  write_results(results, out_dir);

  const Shape& x_shape = seq_shape;
  const Shape& neuron_shape = step_shape;
  const auto count = static_cast<long long>(shape_numel(neuron_shape));
  std::printf("neuron %s: T = %lld, shape %s (%lld neuron%s), device %s, dtype %.*s, %s\n",
              neuron.name().c_str(), static_cast<long long>(x_shape.empty() ? 0 : x_shape[0]),
              shape_text(neuron_shape).c_str(), count, count == 1 ? "" : "s", device.str().c_str(),
              static_cast<int>(dtype_name(dtype).size()), dtype_name(dtype).data(),
              backward ? "training forward + backward" : "inference");
  if (dtype == DType::flex16) {
    std::vector<const NamedArrays*> written = {&forward.outputs, &forward.state_sequences};
    std::printf("flex16 sequences (%s): %s\n", o.iwl_policy.c_str(),
                flex16_iwl_text(written).c_str());
  }
  std::printf("elapsed %.3f ms (including any kernel compilation)\n", elapsed_ms);
  std::printf("wrote %zu file%s to %s:", results.size(), results.size() == 1 ? "" : "s",
              out_dir.string().c_str());
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
    if (args.front() == "help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    CLI::App app{"", "flexkit neuron"};
    app.formatter(std::make_shared<Formatter>());
    app.footer(kTopFooter);
    app.require_subcommand(1);
    Options o;
    std::vector<std::string> settings, ins, grads;
    std::string out, device, dtype;
    bool allow_nonfinite = false, check_finite = false;

    CLI::App* show_app = app.add_subcommand("show", "print a neuron's source and generated code");
    show_app->footer(kShowFooter);
    show_app->add_option("neuron", o.neuron, "a built-in name or a neuron file")
        ->type_name("<neuron>")
        ->required();
    repeatable(show_app, "--set", settings, "NAME=VALUE", kSetHelp);
    repeatable(show_app, "--section", o.sections, "NAME",
               "print only this section (repeatable): interface, source, forward, backward, "
               "residuals, cuda, cpu");

    CLI::App* run_app = app.add_subcommand("run", "run a neuron over .npy sequences");
    run_app->footer(kRunFooter);
    run_app->add_option("neuron", o.neuron, "a built-in name or a neuron file")
        ->type_name("<neuron>")
        ->required();
    repeatable(run_app, "--set", settings, "NAME=VALUE", "as for `flexkit neuron show`");
    repeatable(run_app, "--in", ins, "NAME=FILE.npy",
               "every input sequence [T, ...] by its name (required); an initial state [...] by "
               "the state's name (absent states start at their init value); a learnable or "
               "per-neuron parameter's value");
    repeatable(run_app, "--grad", grads, "NAME=FILE.npy",
               "dL/d(output sequence) by the output's name, dL/d(state sequence) by the state's "
               "name, dL/d(final state) as <state>_final [...]; any --grad runs the training "
               "forward and the backward kernel");
    run_app
        ->add_option("--out", out,
                     "receives <output>.npy, <state>.npy (sequences), "
                     "<state>_final.npy and, with a backward, grad_<input>.npy, "
                     "grad_<state>0.npy and grad_<param>.npy (learnable "
                     "parameters). Created if absent; files appear only when the "
                     "whole run succeeded; other files are kept")
        ->type_name("DIR")
        ->required();
    auto* o_device =
        run_app->add_option("--device", device, "cpu (default) or cuda[:N]")->type_name("D");
    auto* o_dtype = run_app
                        ->add_option("--dtype", dtype,
                                     "how sequences and residuals are stored: f32 (default), "
                                     "bf16 or flex16")
                        ->type_name("T");
    std::string iwl_policy;
    auto* o_iwl = run_app
                      ->add_option("--iwl", o.iwl,
                                   "flex16: the sequences' exponent, values |x| < 2^iwl "
                                   "(default 4; with --iwl-policy fixed)")
                      ->type_name("N")
                      ->check(CLI::Range(kFlex16MinIwl, kFlex16MaxIwl));
    auto* o_policy = run_app
                         ->add_option("--iwl-policy", iwl_policy,
                                      "flex16: fixed (--iwl, the default), exact (for each "
                                      "sequence the smallest exponent holding it) or autoflex "
                                      "(predicted per sequence; exact on a first write)")
                         ->type_name("P")
                         ->check(CLI::IsMember({"fixed", "exact", "autoflex"}));
    auto* o_check = run_app->add_flag(
        "--check-finite", check_finite,
        "warn on stderr (count, first index) about NaN or infinite values in each input and "
        "each result; the run goes on (the default)");
    run_app
        ->add_flag("--allow-nonfinite", allow_nonfinite, "no warnings about NaN or infinite values")
        ->excludes(o_check);

    std::vector<std::string> reversed(args.rbegin(), args.rend());
    try {
      app.parse(reversed);
    } catch (const CLI::CallForHelp& e) {
      return app.exit(e);  // the help of the subcommand given, on stdout; 0
    } catch (const CLI::CallForAllHelp& e) {
      return app.exit(e);
    } catch (const CLI::ParseError& e) {
      std::string message = e.what();
      for (char& c : message)
        if (c == '\n') c = ' ';
      throw UsageError(message);
    }

    o.settings = split_all("--set", settings);
    if (run_app->parsed()) {
      o.ins = split_all("--in", ins);
      o.grads = split_all("--grad", grads);
      if (out.empty()) throw UsageError("--out needs a value");
      o.out = out;
      if (*o_device) o.device = device;
      if (*o_dtype) o.dtype = dtype;
      if (*o_policy) o.iwl_policy = iwl_policy;
      if ((*o_iwl || *o_policy) && (!o.dtype || *o.dtype != "flex16"))
        throw UsageError("--iwl and --iwl-policy apply to --dtype flex16 only");
      if (*o_iwl && o.iwl_policy != "fixed")
        throw UsageError("--iwl sets the exponent of --iwl-policy fixed; " + o.iwl_policy +
                         " chooses its own");
      o.check_finite = !allow_nonfinite;
      return run(o);
    }
    return show(o);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "flexkit neuron: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flexkit neuron: %s\n", e.what());
    return 1;
  }
}

}  // namespace flexkit::cli
