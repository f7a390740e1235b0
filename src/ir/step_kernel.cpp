#include "ir/step_kernel.hpp"

#include <bit>
#include <charconv>
#include <cstdio>
#include <sstream>

#include "core/text.hpp"
#include "flexkit/error.hpp"

namespace flexkit::snn {

using detail::cat;

namespace {

// Shortest decimal that reads back as the same float; a NaN other than the default quiet NaN
// shows its bits, since the listing is also the kernel's identity.
std::string float_text(float v) {
  if (v != v) {
    const auto bits = std::bit_cast<std::uint32_t>(v);
    if (bits == 0x7fc00000u) return "nan";
    char buf[24];
    std::snprintf(buf, sizeof buf, "nan(0x%08x)", static_cast<unsigned>(bits));
    return buf;
  }
  char buf[48];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

bool is_identifier(const std::string& s) {
  if (s.empty() || (s[0] >= '0' && s[0] <= '9')) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'))
      return false;
  return true;
}

// How leaves and outputs name a slot: its name where that alone identifies it, else "#index"
// (which no identifier can be), so equal listings always mean equal slot references.
template <class Slot>
std::vector<std::string> slot_labels(const std::vector<Slot>& slots) {
  std::vector<std::string> labels;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    bool unique = is_identifier(slots[i].name);
    for (std::size_t j = 0; unique && j < slots.size(); ++j)
      unique = j == i || slots[j].name != slots[i].name;
    labels.push_back(unique ? slots[i].name : cat("#", i));
  }
  return labels;
}

std::string label(const std::vector<std::string>& labels, int slot) {
  if (slot >= 0 && static_cast<std::size_t>(slot) < labels.size())
    return labels[static_cast<std::size_t>(slot)];
  return cat("#", slot, "(invalid)");
}

std::string value_ref(int id) {
  return cat("%", id);
}

// One instruction per line, leaves named by their slots' labels.
std::string program_listing(const StepProgram& program, const std::string& indent,
                            const std::vector<std::string>& in_labels,
                            const std::vector<std::string>& carried_labels,
                            const std::vector<std::string>& param_labels) {
  std::string s;
  for (std::size_t i = 0; i < program.instrs.size(); ++i) {
    const ir::Instr& in = program.instrs[i];
    s += cat(indent, "%", i, " = ", ir::op_info(in.op).name);
    switch (in.op) {
      case ir::Op::constant:
        s += cat(" ", float_text(in.constant));
        break;
      case ir::Op::seq_in:
        s += cat(" ", label(in_labels, in.slot));
        break;
      case ir::Op::carried:
        s += cat(" ", label(carried_labels, in.slot));
        break;
      case ir::Op::param:
        s += cat(" ", label(param_labels, in.slot));
        break;
      case ir::Op::spike_grad:
        s += cat(" ", surrogate_name(in.surrogate), "(", float_text(in.alpha), ") ",
                 value_ref(in.a));
        break;
      default: {
        const int arity = ir::op_info(in.op).arity;
        const int args[3] = {in.a, in.b, in.c};
        for (int j = 0; j < arity; ++j) s += cat(j ? ", " : " ", value_ref(args[j]));
        break;
      }
    }
    s += "\n";
  }
  return s;
}

}  // namespace

std::string to_string(const StepKernel& kernel) {
  const auto in_labels = slot_labels(kernel.seq_in);
  const auto out_labels = slot_labels(kernel.seq_out);
  const auto carried_labels = slot_labels(kernel.carried);
  const auto param_labels = slot_labels(kernel.params);

  std::string s =
      cat("step_kernel ", kernel.name, kernel.reverse ? " (reverse)" : " (forward)", "\n");
  for (std::size_t i = 0; i < kernel.seq_in.size(); ++i)
    s += cat(
        "  seq_in ", i, " ", kernel.seq_in[i].name, ": ", dtype_name(kernel.seq_in[i].dtype),
        kernel.seq_in[i].steady ? " (steady)" : "", kernel.seq_in[i].replayed ? " (replayed)" : "",
        kernel.seq_in[i].pool > 0 ? cat(" (max-pooled ", kernel.seq_in[i].pool, ")") : "", "\n");
  for (std::size_t i = 0; i < kernel.seq_out.size(); ++i)
    s += cat("  seq_out ", i, " ", kernel.seq_out[i].name, ": ",
             dtype_name(kernel.seq_out[i].dtype), "\n");
  for (std::size_t i = 0; i < kernel.carried.size(); ++i)
    s += cat("  carried ", i, " ", kernel.carried[i].name,
             kernel.carried[i].summed_in_groups ? " (final summed in groups)" : "", " (init ",
             float_text(kernel.carried[i].init_value), ")\n");
  for (std::size_t i = 0; i < kernel.params.size(); ++i)
    s += cat("  param ", i, " ", kernel.params[i].name,
             kernel.params[i].per_neuron    ? ": per neuron"
             : kernel.params[i].per_channel ? ": per channel"
                                            : ": scalar",
             "\n");

  s += program_listing(kernel.body, "  ", in_labels, carried_labels, param_labels);
  for (std::size_t j = 0; j < kernel.seq_out_value.size(); ++j)
    s += cat("  seq_out ", label(out_labels, static_cast<int>(j)), " = ",
             value_ref(kernel.seq_out_value[j]), "\n");
  for (std::size_t k = 0; k < kernel.carried_next.size(); ++k)
    s += cat("  carried_next ", label(carried_labels, static_cast<int>(k)), " = ",
             value_ref(kernel.carried_next[k]), "\n");
  if (kernel.replay) {
    // Its carried lines do not start with "  carried ": their initial values stay in the
    // structure (they are compiled in, not launch parameters).
    const StepReplay& r = *kernel.replay;
    const auto replay_carried = slot_labels(r.carried);
    s += "  replay (t = 0..T-1, first)\n";
    for (std::size_t i = 0; i < r.carried.size(); ++i)
      s += cat("    replay carried ", i, " ", r.carried[i].name, " (init ",
               float_text(r.carried[i].init_value), ")\n");
    s += program_listing(r.body, "    ", in_labels, replay_carried, param_labels);
    for (std::size_t k = 0; k < r.carried_next.size(); ++k)
      s += cat("    carried_next ", label(replay_carried, static_cast<int>(k)), " = ",
               value_ref(r.carried_next[k]), "\n");
    for (std::size_t v = 0; v < r.values.size(); ++v)
      s += cat("    replayed ", v, " = ", value_ref(r.values[v]), "\n");
  }
  return s;
}

std::string step_kernel_structure(const StepKernel& kernel) {
  std::istringstream listing(to_string(kernel));
  std::string out;
  for (std::string line; std::getline(listing, line);) {
    // Declarations of carried slots ("  carried 0 v (init 0)") end with the initial value.
    if (line.rfind("  carried ", 0) == 0) {
      const std::size_t init = line.rfind(" (init ");
      if (init != std::string::npos) line.erase(init);
    }
    out += line;
    out += '\n';
  }
  return out;
}

int pooled_slot(const StepKernel& kernel) {
  for (std::size_t s = 0; s < kernel.seq_in.size(); ++s)
    if (kernel.seq_in[s].pool > 0) return static_cast<int>(s);
  return -1;
}

void check_pool_launch(const StepKernel& kernel, const StepKernelLaunch& launch) {
  const auto what = [&](const std::string& s) { return cat("step kernel ", kernel.name, ": ", s); };
  int pooled = 0;
  for (const SequenceSlot& s : kernel.seq_in) {
    if (s.pool == 0) continue;
    ++pooled;
    if (s.pool < 0 || s.pool > kMaxPool || s.steady || s.replayed)
      throw ValueError(what(cat("a pooled sequence needs a window of 1 to ", kMaxPool,
                                " and is neither steady nor replayed")));
  }
  if (pooled == 0) return;
  if (pooled > 1) throw ValueError(what("at most one sequence may be pooled"));
  const int slot = pooled_slot(kernel);
  const std::int64_t k = kernel.seq_in[static_cast<std::size_t>(slot)].pool;
  const std::int64_t n = launch.neurons, steps = launch.steps;
  const std::int64_t inner = launch.inner > 0 ? launch.inner : n;
  const std::int64_t h = launch.pool_height, w = launch.pool_width;
  if (h <= 0 || w <= 0 || h % k != 0 || w % k != 0 || inner <= 0 || n % inner != 0 ||
      (n / inner) % (h * w) != 0)
    throw ValueError(
        what(cat("pooled images of ", h, " x ", w, " do not tile the ", inner > 0 ? n / inner : 0,
                 " rows of the neurons by ", k, " x ", k, " windows")));
  const Array& source = launch.pool_source;
  if (!source.defined() || source.dtype() != DType::u8 || source.size() != n * steps)
    throw ValueError(what(cat("the pool's source must be u8 with ", n * steps, " elements, got ",
                              source.defined() ? source.describe() : std::string("none"))));
  const Array& pooled_values = launch.seq_in.at(static_cast<std::size_t>(slot));
  if (!pooled_values.defined() || pooled_values.size() != n / (k * k) * steps)
    throw ValueError(
        what(cat("the pooled sequence must have ", n / (k * k) * steps, " elements, got ",
                 pooled_values.defined() ? pooled_values.describe() : std::string("none"))));
}

}  // namespace flexkit::snn
