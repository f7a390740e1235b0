// FlexSN step kernels as CUDA C++ for NVRTC: one thread per neuron walks the T steps with the
// carried values in registers. Sequence loads run a batch of steps ahead of the arithmetic
// (which waits on the previous step's state), so every thread keeps several independent loads
// in flight and the kernel streams at close to the copy rate. All op math is the shared
// portable code the CPU interpreter calls, so both backends agree.
#include "codegen/cuda_step_kernel_source.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <vector>

#include "codegen/code_stream.hpp"
#include "codegen/cuda_expr_source.hpp"
#include "core/text.hpp"
#include "flexkit/error.hpp"
#include "flexkit/portable/neuron_ops.hpp"
#include "ir/step_kernel.hpp"

namespace flexkit::snn {
namespace {

using codegen::CodeStream;
using detail::cat;

std::string decimal(float v) {
  char buf[48];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// Names travel into `//` comments: nothing that could end the comment or splice lines.
std::string comment_safe(const std::string& s) {
  std::string out = s;
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || c == '\\' || c == 0x7f) c = '?';
  return out;
}

std::string value(int id) {
  return cat("v", id);
}

class Generator {
 public:
  Generator(const StepKernel& k, std::int64_t fixed_steps) : k_(k), fixed_steps_(fixed_steps) {
    used_in_.assign(k.seq_in.size(), false);
    for (const ir::Instr& in : k.body.instrs)
      if (in.op == ir::Op::seq_in) used_in_[static_cast<std::size_t>(in.slot)] = true;
    read_in_ = used_in_;
    replay_reads_.assign(k.seq_in.size(), false);
    replay_index_.assign(k.seq_in.size(), -1);
    if (k.replay) {
      for (const ir::Instr& in : k.replay->body.instrs)
        if (in.op == ir::Op::seq_in)
          read_in_[static_cast<std::size_t>(in.slot)] =
              replay_reads_[static_cast<std::size_t>(in.slot)] = true;
      for (std::size_t s = 0, r = 0; s < k.seq_in.size(); ++s)
        if (k.seq_in[s].replayed) replay_index_[s] = static_cast<int>(r++);
    }
    int loaded = 0;
    for (std::size_t s = 0; s < used_in_.size(); ++s) loaded += per_step(s) ? 1 : 0;
    // Registers for the batch grow with the loaded sequences; fewer steps ahead then.
    batch_ = loaded <= 4 ? 8 : 4;
  }

  std::string run() {
    header();
    body_function();
    os_.blank();
    if (k_.replay) {
      replay_function();
      os_.blank();
    }
    kernel();
    return os_.str();
  }

 private:
  static int at_least_one(std::size_t n) { return n > 0 ? static_cast<int>(n) : 1; }
  int ni() const { return at_least_one(k_.seq_in.size()); }
  int no() const { return at_least_one(k_.seq_out.size()); }
  int nc() const { return at_least_one(k_.carried.size()); }
  int np() const { return at_least_one(k_.params.size()); }

  void header() {
    os_.line("// flexkit step kernel ", comment_safe(k_.name), ", generated at run time.");
    std::istringstream listing(step_kernel_structure(k_));
    for (std::string line; std::getline(listing, line);) os_.line("//   ", comment_safe(line));
    os_.line("// Carried initial values: carried_init[k][n], or carried_init_value[k] where that");
    os_.line("// pointer is null (kernel arguments, like T and N).");
    os_.blank();
    os_.line("#include \"flexkit/rtc_prelude.cuh\"");
    os_.line("#include \"flexkit/portable/ew_ops.hpp\"");
    os_.line("#include \"flexkit/portable/neuron_ops.hpp\"");
    os_.line("#include \"flexkit/neuron_kernels.cuh\"");
    os_.blank();
    os_.line("using namespace flexkit::rtc;");
    os_.blank();
    const int s = codegen::kStepMaxSlots;
    // Written out by hand: a Scope closes with "}" and a struct needs "};".
    os_.line("struct StepKernelArgs {");
    const auto field = [&](const auto&... parts) { os_.line("  ", parts...); };
    field("int64_t neurons;");
    field("int64_t steps;");
    field("int64_t inner;");
    field("int64_t channel_neurons;");
    field("int64_t final_group;");
    field("const void* seq_in[", s, "];");
    field("void* seq_out[", s, "];");
    field("ExprStats* seq_out_stats[", s, "];");
    field("const float* carried_init[", s, "];");
    field("float* carried_final[", s, "];");
    field("const float* params[", s, "];");
    field("float carried_init_value[", s, "];");
    field("int32_t seq_in_iwl[", s, "];");
    field("int32_t seq_out_iwl[", s, "];");
    field("const void* pool_source;");
    field("int64_t pool_height;");
    field("int64_t pool_width;");
    field("IndexDivider inner_divider;");
    field("IndexDivider channel_divider;");
    field("IndexDivider pool_width_divider;");
    field("IndexDivider pool_height_divider;");
    field("int32_t index32;");
    field("int32_t unused;");
    os_.line("};");
    // NVRTC has no offsetof; the sizes catch a field added, removed or resized on one side.
    os_.line("static_assert(sizeof(StepKernelArgs) == ", sizeof(codegen::StepKernelArgs),
             " && sizeof(ExprStats) == ", sizeof(codegen::ExprStats),
             ", \"kernel parameter structs differ from the host's\");");
    os_.blank();
    os_.line(
        "// Steps whose sequence values are loaded before any of them is computed (one lane).");
    os_.line("constexpr int kBatchSteps = ", batch_, ";");
    os_.blank();
  }

  // A step program's instructions as `const float vI = ...;` lines: leaves from in[], state[]
  // (`carried` names them) and p[].
  void instructions(const StepProgram& program, const std::vector<CarriedSlot>& carried) {
    for (std::size_t i = 0; i < program.instrs.size(); ++i) {
      const ir::Instr& in = program.instrs[i];
      const std::string lhs = cat("const float v", i, " = ");
      switch (in.op) {
        case ir::Op::constant:
          os_.line(lhs, codegen::float_literal(in.constant), ";  // ", decimal(in.constant));
          break;
        case ir::Op::seq_in:
          os_.line(lhs, "in[", in.slot, "];  // ", comment_safe(k_.seq_in[in.slot].name));
          break;
        case ir::Op::carried:
          os_.line(lhs, "state[", in.slot, "];  // ", comment_safe(carried[in.slot].name));
          break;
        case ir::Op::param:
          os_.line(lhs, "p[", in.slot, "];  // ", comment_safe(k_.params[in.slot].name));
          break;
        default:
          os_.line(lhs, codegen::device_op_call(in, value(in.a), value(in.b), value(in.c)), ";");
          break;
      }
    }
  }

  void body_function() {
    os_.line("// One step of one neuron: seq_in values in, seq_out values out, state updated.");
    CodeStream::Scope fn(os_, "__device__ __forceinline__ void step_body(const float (&in)[", ni(),
                         "], float (&state)[", nc(), "], const float (&p)[", np(),
                         "], float (&out)[", no(), "])");
    instructions(k_.body, k_.carried);
    for (std::size_t j = 0; j < k_.seq_out.size(); ++j)
      os_.line("out[", j, "] = ", value(k_.seq_out_value[j]), ";  // ",
               comment_safe(k_.seq_out[j].name));
    // Every value above was computed from the old state before any of it changes.
    for (std::size_t c = 0; c < k_.carried.size(); ++c)
      os_.line("state[", c, "] = ", value(k_.carried_next[c]), ";  // ",
               comment_safe(k_.carried[c].name));
  }

  // The replay's step: the kernel's seq_in values in (only those it reads are set), its own
  // carried values updated, the replayed values out.
  void replay_function() {
    const StepReplay& r = *k_.replay;
    os_.line("// One replayed forward step of one neuron.");
    CodeStream::Scope fn(os_, "__device__ __forceinline__ void replay_body(const float (&in)[",
                         ni(), "], float (&state)[", at_least_one(r.carried.size()),
                         "], const float (&p)[", np(), "], float (&out)[",
                         at_least_one(r.values.size()), "])");
    instructions(r.body, r.carried);
    for (std::size_t v = 0; v < r.values.size(); ++v)
      os_.line("out[", v, "] = ", value(r.values[v]), ";");
    for (std::size_t c = 0; c < r.carried.size(); ++c)
      os_.line("state[", c, "] = ", value(r.carried_next[c]), ";  // ",
               comment_safe(r.carried[c].name));
  }

  // The replay at the start of a thread: its steps run forward, every replayed value kept in
  // `replayed` for the reverse loop to read (registers when T is a constant of the program and
  // the loops unroll, else local memory indexed by the step).
  void replay_loop() {
    const StepReplay& r = *k_.replay;
    const std::size_t count = at_least_one(r.values.size());
    os_.line("// The forward steps replayed: the values a stored residual would hold.");
    os_.line("float replayed[", fixed_steps_ > 0 ? fixed_steps_ : kMaxReplaySteps, "][V][", count,
             "];");
    {
      CodeStream::Scope scope(os_);
      os_.line("float rstate[V][", at_least_one(r.carried.size()), "];");
      os_.line("#pragma unroll");
      {
        CodeStream::Scope lanes(os_, "for (int l = 0; l < V; ++l)");
        for (std::size_t c = 0; c < r.carried.size(); ++c)
          os_.line("rstate[l][", c, "] = ", codegen::float_literal(r.carried[c].init_value),
                   ";  // ", comment_safe(r.carried[c].name));
        if (r.carried.empty()) os_.line("rstate[l][0] = 0.0f;");
      }
      os_.line(fixed_steps_ > 0 ? "#pragma unroll" : "#pragma unroll 4");
      CodeStream::Scope steps(os_, "for (int64_t t = 0; t < steps; ++t)");
      os_.line("const int64_t at = t * inner + base;");
      os_.line("#pragma unroll");
      CodeStream::Scope lanes(os_, "for (int l = 0; l < V; ++l)");
      std::string init;
      for (std::size_t s = 0; s < k_.seq_in.size(); ++s) {
        std::string v = "0.0f";
        if (replay_reads_[s])
          v = k_.seq_in[s].steady
                  ? cat("steady", s, "[l]")
                  : codegen::device_load(k_.seq_in[s].dtype, cat("in", s, "[at + l]"), in_iwl(s));
        init += cat(s ? ", " : "", v);
      }
      if (k_.seq_in.empty()) init = "0.0f";
      os_.line("const float in[", ni(), "] = {", init, "};");
      os_.line("float out[", count, "];");
      os_.line("replay_body(in, rstate[l], p[l], out);");
      os_.line("#pragma unroll");
      os_.line("for (int v = 0; v < ", count, "; ++v) replayed[t][l][v] = out[v];");
    }
  }

  // A pooled slot's values at step t for the thread's lanes (a lambda, `pooled<s>(t, out)`): the
  // window's gradient and its k² spikes (read through the cache: the window's k² threads read
  // them), routed by the first-maximum rule of the CPU interpreter, applied to the u8 spikes of
  // the four lanes at once (first_max_bytes).
  void pooled_loader(std::size_t s) {
    const int k = k_.seq_in[s].pool;
    os_.line("// ", comment_safe(k_.seq_in[s].name), ": pooled by a ", k, " x ", k,
             " max pool over args.pool_source.");
    os_.line(
        "const uint8_t* __restrict__ pool_source = static_cast<const uint8_t*>(args.pool_source);");
    os_.line("const int64_t column = i - row * inner;");
    os_.line("const int64_t ph = args.pool_height, pw = args.pool_width;");
    os_.line("const int64_t row_by_w = quotient(row, pw, args.pool_width_divider, index32);");
    os_.line("const int64_t image = quotient(row_by_w, ph, args.pool_height_divider, index32);");
    os_.line("const int64_t pool_w = row - row_by_w * pw, pool_h = row_by_w - image * ph;");
    os_.line("const int pool_self = int(pool_h % ", k, " * ", k, " + pool_w % ", k, ");");
    os_.line("const int64_t pooled_base = ((image * (ph / ", k, ") + pool_h / ", k, ") * (pw / ", k,
             ") + pool_w / ", k, ") * steps * inner + column;");
    os_.line("const int64_t tap_base = ((image * ph + pool_h / ", k, " * ", k, ") * pw + pool_w / ",
             k, " * ", k, ") * steps * inner + column;");
    os_.line("const int64_t tap_step = steps * inner;  // between horizontally neighbouring taps");
    const char* type = codegen::device_type(k_.seq_in[s].dtype);
    {
      CodeStream::Scope fn(os_, "const auto pooled", s, " = [&](int64_t t, float (&out)[V])");
      os_.line(type, " g[V];");
      os_.line("ldg_lanes<V>(in", s, " + pooled_base + t * inner, g);");
      os_.line("unsigned taps[", k * k, "];  // lane l in byte l");
      os_.line("#pragma unroll");
      os_.line("for (int q = 0; q < ", k * k, "; ++q)");
      os_.line("  taps[q] = ldg_byte_lanes<V>(pool_source + tap_base + ((q / ", k, ") * pw + q % ",
               k, ") * tap_step + t * inner);");
      os_.line("const unsigned first = first_max_bytes(taps, pool_self);");
      os_.line("#pragma unroll");
      os_.line("for (int l = 0; l < V; ++l)");
      os_.line("  out[l] = (first >> (8 * l)) & 1u ? ",
               codegen::device_load(k_.seq_in[s].dtype, "g[l]", in_iwl(s)), " : 0.0f;");
    }
    os_.line(";");
  }

  int grouped_count() const {
    int count = 0;
    for (const CarriedSlot& c : k_.carried) count += c.summed_in_groups ? 1 : 0;
    return count;
  }
  int grouped_index(std::size_t slot) const {
    int index = 0;
    for (std::size_t c = 0; c < slot; ++c) index += k_.carried[c].summed_in_groups ? 1 : 0;
    return index;
  }

  // The summed_in_groups finals: per neuron where final_group is 1, else per group of 32
  // neurons (a warp with one lane each, 8 threads with four) summed as a balanced binary tree in
  // neuron order (ir/step_kernel.hpp): a thread's lanes pairwise, then the threads by xor
  // shuffles (both threads of a pair form the same float: a + b == b + a), the group's first
  // thread storing.
  void grouped_finals() {
    {
      CodeStream::Scope single(os_, "if (args.final_group == 1)");
      CodeStream::Scope active(os_, "if (i < n)");
      for (std::size_t c = 0; c < k_.carried.size(); ++c) {
        if (!k_.carried[c].summed_in_groups) continue;
        os_.line("if (args.carried_final[", c, "])");
        os_.line("  for (int l = 0; l < V; ++l) args.carried_final[", c, "][i + l] = grouped[l][",
                 grouped_index(c), "];");
      }
    }
    CodeStream::Scope groups(os_, "else");
    os_.line("constexpr int kThreads = ", kFinalGroup, " / V;  // a group's threads");
    for (std::size_t c = 0; c < k_.carried.size(); ++c) {
      if (!k_.carried[c].summed_in_groups) continue;
      const int q = grouped_index(c);
      CodeStream::Scope slot(os_);
      os_.line("float lanes[V];");
      os_.line("#pragma unroll");
      os_.line("for (int l = 0; l < V; ++l) lanes[l] = grouped[l][", q, "];");
      os_.line("#pragma unroll");
      os_.line("for (int w = 1; w < V; w *= 2)");
      os_.line("  #pragma unroll");
      os_.line("  for (int l = 0; l < V; l += 2 * w) lanes[l] = lanes[l] + lanes[l + w];");
      os_.line("float sum = lanes[0];");
      os_.line("#pragma unroll");
      os_.line(
          "for (int m = 1; m < kThreads; m *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, m);");
      os_.line("if ((threadIdx.x & (kThreads - 1)) == 0 && i < n && args.carried_final[", c, "])");
      os_.line("  args.carried_final[", c, "][i / ", kFinalGroup, "] = sum;");
    }
  }

  bool replayed(std::size_t s) const { return replay_index_[s] >= 0; }
  bool pooled(std::size_t s) const { return k_.seq_in[s].pool > 0; }
  bool steady(std::size_t s) const { return read_in_[s] && k_.seq_in[s].steady; }
  bool per_step(std::size_t s) const { return used_in_[s] && !k_.seq_in[s].steady && !replayed(s); }
  std::string in_iwl(std::size_t s) const { return cat("in", s, "_iwl"); }
  std::string out_iwl(std::size_t s) const { return cat("out", s, "_iwl"); }
  std::string out_stats(std::size_t s) const { return cat("out", s, "_stats"); }

  // Stores of lane l's outputs into the vector words being assembled for the step.
  void store_outputs_to_lanes() {
    for (std::size_t j = 0; j < k_.seq_out.size(); ++j)
      os_.line(
          "w", j, "[l] = ",
          codegen::device_store(k_.seq_out[j].dtype, cat("out[", j, "]"), out_iwl(j), out_stats(j)),
          ";");
  }

  // `const float in[]` for step `t` (an expression), each loaded slot's value from `raw(slot)`.
  template <class Raw>
  void inputs(const Raw& raw, const std::string& t) {
    std::string init;
    for (std::size_t s = 0; s < k_.seq_in.size(); ++s)
      init += cat(s ? ", " : "", !used_in_[s]  ? std::string("0.0f")
                                 : replayed(s) ? cat("replayed[", t, "][l][", replay_index_[s], "]")
                                 : steady(s)   ? cat("steady", s, "[l]")
                                 : pooled(s)
                                     ? raw(s)
                                     : codegen::device_load(k_.seq_in[s].dtype, raw(s), in_iwl(s)));
    if (k_.seq_in.empty()) init = "0.0f";
    os_.line("const float in[", ni(), "] = {", init, "};");
  }

  // One step for the V lanes of this thread: loads already in raw<s>[u][lane], stores as one
  // vector word per output at element index `at` (of lane 0).
  void lanes_step(const std::string& raw_index, const std::string& t) {
    for (std::size_t j = 0; j < k_.seq_out.size(); ++j)
      os_.line(codegen::device_type(k_.seq_out[j].dtype), " w", j, "[V];");
    {
      os_.line("#pragma unroll");
      CodeStream::Scope lanes(os_, "for (int l = 0; l < V; ++l)");
      inputs([&](std::size_t s) { return cat("raw", s, raw_index, "[l]"); }, t);
      os_.line("float out[", no(), "];");
      os_.line("step_body(in, state[l], p[l], out);");
      store_outputs_to_lanes();
    }
    for (std::size_t j = 0; j < k_.seq_out.size(); ++j)
      os_.line("stcs_lanes<V>(out", j, " + at, w", j, ");");
  }

  void batch_body(const std::string& first_t, const char* dir, bool guarded) {
    const char* guard = guarded ? "if (u < count) " : "";
    os_.line("const int64_t first = ", first_t, " * inner + base;");
    for (std::size_t s = 0; s < k_.seq_in.size(); ++s) {
      if (!per_step(s)) continue;
      if (pooled(s)) {
        os_.line("float raw", s, "[kBatch][V];");
        os_.line("#pragma unroll");
        os_.line("for (int u = 0; u < kBatch; ++u)");
        os_.line("  ", guard, "pooled", s, "(", first_t, dir, "u, raw", s, "[u]);");
        continue;
      }
      os_.line(codegen::device_type(k_.seq_in[s].dtype), " raw", s, "[kBatch][V];");
      os_.line("#pragma unroll");
      os_.line("for (int u = 0; u < kBatch; ++u)");
      os_.line("  ", guard, "ldcs_lanes<V>(in", s, " + (first", dir, "u * inner), raw", s, "[u]);");
    }
    os_.line("#pragma unroll");
    CodeStream::Scope step(os_, "for (int u = 0; u < kBatch; ++u)");
    if (guarded) os_.line("if (u >= count) break;");
    os_.line("const int64_t at = first", dir, "u * inner;");
    lanes_step("[u]", cat("(", first_t, dir, "u)"));
  }

  void kernel() {
    const bool rev = k_.reverse;
    os_.line("// Each thread runs V neighbouring neurons (V = 4 moves 4 lanes per load and store");
    os_.line("// when inner and the addresses allow it); t runs ",
             rev ? "T-1 down to 0" : "0 up to T-1", ". Sequences are [outer, T, inner]:");
    os_.line("// step t of neuron n = o * inner + j is element o * T * inner + t * inner + j");
    os_.line("// ([T, N] when inner = N).");
    {
      CodeStream::Scope fn(os_,
                           "template <int V> __device__ __forceinline__ void run_neurons(const "
                           "StepKernelArgs& args)");
      os_.line("const int64_t n = args.neurons;");
      if (fixed_steps_ > 0)
        os_.line("constexpr int64_t steps = ", fixed_steps_, ";  // this program's T");
      else
        os_.line("const int64_t steps = args.steps;");
      os_.line("const int64_t inner = args.inner;");
      os_.line("const int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V;");
      os_.line("const bool index32 = args.index32 != 0;  // every neuron index below 2^31");
      // Four lanes already quadruple the bytes of each load; half the batch keeps the registers
      // (and so the occupancy) of the one-lane kernel.
      os_.line(
          "constexpr int kBatch = V == 1 ? kBatchSteps : (kBatchSteps / 2 > 2 ? kBatchSteps / 2 : "
          "2);");
      for (std::size_t s = 0; s < k_.seq_in.size(); ++s) {
        if (!read_in_[s] || replayed(s)) continue;
        const char* type = codegen::device_type(k_.seq_in[s].dtype);
        os_.line("const ", type, "* __restrict__ in", s, " = static_cast<const ", type,
                 "*>(args.seq_in[", s, "]);  // ", comment_safe(k_.seq_in[s].name), ": ",
                 dtype_name(k_.seq_in[s].dtype));
        if (k_.seq_in[s].dtype == DType::flex16)
          os_.line("const int ", in_iwl(s), " = args.seq_in_iwl[", s, "];");
      }
      for (std::size_t j = 0; j < k_.seq_out.size(); ++j) {
        const char* type = codegen::device_type(k_.seq_out[j].dtype);
        os_.line(type, "* __restrict__ out", j, " = static_cast<", type, "*>(args.seq_out[", j,
                 "]);  // ", comment_safe(k_.seq_out[j].name), ": ",
                 dtype_name(k_.seq_out[j].dtype));
        if (k_.seq_out[j].dtype == DType::flex16) {
          os_.line("const int ", out_iwl(j), " = args.seq_out_iwl[", j, "];");
          os_.line("StatsLocal ", out_stats(j), " = {0, 0ull, 0ull};");
        }
      }
      if (grouped_count() > 0) {
        os_.line("// Final values summed in groups, kept past the active neurons' part: every");
        os_.line("// thread of a warp takes part in the sums.");
        os_.line("float grouped[V][", grouped_count(), "] = {};");
      }
      {
        CodeStream::Scope active(os_, "if (i < n)");
        os_.line("// Element t = 0 of neuron i; its V lanes share an outer row (V divides inner).");
        os_.line("const int64_t row = quotient(i, inner, args.inner_divider, index32);");
        os_.line("const int64_t base = i + row * (steps - 1) * inner;");
        os_.line("float p[V][", np(), "];");
        os_.line("float state[V][", nc(), "];");
        for (std::size_t s = 0; s < k_.seq_in.size(); ++s)
          if (steady(s)) os_.line("float steady", s, "[V];  // one value for every step");
        bool per_channel = false;
        for (const ParamSlot& q : k_.params) per_channel = per_channel || q.per_channel;
        if (per_channel)  // the launch takes V lanes only where V divides channel_neurons
          os_.line(
              "const int64_t channel = quotient(i, args.channel_neurons, args.channel_divider, "
              "index32);  // every lane's");
        {
          os_.line("#pragma unroll");
          CodeStream::Scope lanes(os_, "for (int l = 0; l < V; ++l)");
          for (std::size_t s = 0; s < k_.seq_in.size(); ++s)
            if (steady(s))  // [outer, 1, inner]: neuron n's value is element n
              os_.line("steady", s, "[l] = ",
                       codegen::device_load(k_.seq_in[s].dtype, cat("in", s, "[i + l]"), in_iwl(s)),
                       ";");
          for (std::size_t q = 0; q < k_.params.size(); ++q)
            os_.line("p[l][", q, "] = __ldg(args.params[", q, "]",
                     k_.params[q].per_neuron    ? " + i + l"
                     : k_.params[q].per_channel ? " + channel"
                                                : "",
                     ");  // ", comment_safe(k_.params[q].name));
          if (k_.params.empty()) os_.line("p[l][0] = 0.0f;");
          for (std::size_t c = 0; c < k_.carried.size(); ++c)
            os_.line("state[l][", c, "] = args.carried_init[", c, "] ? __ldg(args.carried_init[", c,
                     "] + i + l) : args.carried_init_value[", c, "];  // ",
                     comment_safe(k_.carried[c].name));
          if (k_.carried.empty()) os_.line("state[l][0] = 0.0f;");
        }
        if (k_.replay) replay_loop();
        for (std::size_t s = 0; s < k_.seq_in.size(); ++s)
          if (per_step(s) && pooled(s)) pooled_loader(s);
        const std::string first_t = rev ? "(steps - 1 - step)" : "step";
        const char* dir = rev ? " - " : " + ";
        // Whole batches of kBatch steps: every load of the batch is issued before the first
        // step is computed. With four lanes the last, partial batch does the same under guards
        // (kept out of the main loop, whose unguarded form schedules better), so short
        // sequences (T < kBatch) keep their loads in flight together too.
        os_.line("int64_t step = 0;");
        {
          CodeStream::Scope batch(os_, "for (; step + kBatch <= steps; step += kBatch)");
          batch_body(first_t, dir, /*guarded=*/false);
        }
        {
          // One lane: step by step (a guarded batch would cost registers, hence occupancy, in
          // the main loop too).
          CodeStream::Scope one(os_, "if constexpr (V == 1)");
          CodeStream::Scope rest(os_, "for (; step < steps; ++step)");
          os_.line("const int64_t at = ", first_t, " * inner + base;");
          for (std::size_t s = 0; s < k_.seq_in.size(); ++s) {
            if (!per_step(s)) continue;
            if (pooled(s)) {
              os_.line("float raw", s, "[V];");
              os_.line("pooled", s, "(", first_t, ", raw", s, ");");
              continue;
            }
            os_.line(codegen::device_type(k_.seq_in[s].dtype), " raw", s, "[V];");
            os_.line("ldcs_lanes<V>(in", s, " + at, raw", s, ");");
          }
          lanes_step("", first_t);
        }
        {
          CodeStream::Scope wide(os_, "else if (step < steps)");
          os_.line("const int count = int(steps - step);");
          batch_body(first_t, dir, /*guarded=*/true);
        }
        for (std::size_t c = 0; c < k_.carried.size(); ++c) {
          if (k_.carried[c].summed_in_groups) {
            os_.line("for (int l = 0; l < V; ++l) grouped[l][", grouped_index(c), "] = state[l][",
                     c, "];");
            continue;
          }
          os_.line("if (args.carried_final[", c, "])");
          os_.line("  for (int l = 0; l < V; ++l) args.carried_final[", c, "][i + l] = state[l][",
                   c, "];");
        }
      }
      if (grouped_count() > 0) grouped_finals();
      bool first_commit = true;
      for (std::size_t j = 0; j < k_.seq_out.size(); ++j) {
        if (k_.seq_out[j].dtype != DType::flex16) continue;
        if (first_commit)
          os_.line(
              "// Every thread of the block takes part, including those past the last neuron.");
        else
          os_.line("__syncthreads();  // commit_stats reuses one shared buffer");
        first_commit = false;
        os_.line("commit_stats(", out_stats(j), ", args.seq_out_stats[", j, "]);");
      }
    }
    os_.line("");
    // A program built for its T holds its replay in registers: three blocks a multiprocessor
    // then hide more latency than the registers the bound takes away (on an H100, the csnn's
    // first pooled backward 211 -> 188 µs). Other programs keep the plain bound (unchanged there).
    const std::string bounds =
        fixed_steps_ > 0 ? cat(codegen::kStepMaxBlock, ", 3") : cat(codegen::kStepMaxBlock);
    os_.line("FLEXKIT_KERNEL void __launch_bounds__(", bounds, ") ", codegen::kStepKernelEntry,
             "(const StepKernelArgs args) { run_neurons<1>(args); }");
    os_.line("FLEXKIT_KERNEL void __launch_bounds__(", bounds, ") ", codegen::kStepKernelEntryVec4,
             "(const StepKernelArgs args) { run_neurons<4>(args); }");
  }

  const StepKernel& k_;
  std::int64_t fixed_steps_;        // T built into the program, or 0: T from the arguments
  std::vector<bool> used_in_;       // read by the body
  std::vector<bool> read_in_;       // read by the body or the replay
  std::vector<bool> replay_reads_;  // read by the replay
  std::vector<int> replay_index_;   // per seq_in slot: its index in the replay's values, or -1
  int batch_ = 8;
  CodeStream os_;
};

}  // namespace

std::string cuda_step_kernel_source(const StepKernel& kernel, std::int64_t fixed_steps) {
  codegen::check_step_kernel(kernel);
  if (fixed_steps < 0 || (kernel.replay && fixed_steps > kMaxReplaySteps))
    throw ValueError(
        cat("step kernel ", kernel.name, ": cannot build T = ", fixed_steps, " into its program"));
  return Generator(kernel, fixed_steps).run();
}

}  // namespace flexkit::snn

namespace flexkit::codegen {

using detail::cat;
using snn::StepKernel;

void check_step_kernel(const StepKernel& k) {
  const auto what = [&](const std::string& s) { return cat("step kernel ", k.name, ": ", s); };
  const std::size_t counts[4] = {k.seq_in.size(), k.seq_out.size(), k.carried.size(),
                                 k.params.size()};
  const char* kinds[4] = {"sequence inputs", "sequence outputs", "carried values", "parameters"};
  for (int i = 0; i < 4; ++i)
    if (counts[i] > static_cast<std::size_t>(kStepMaxSlots))
      throw UnsupportedError(
          what(cat(counts[i], " ", kinds[i], "; CUDA step kernels take at most ", kStepMaxSlots)));
  for (const auto* slots : {&k.seq_in, &k.seq_out})
    for (const snn::SequenceSlot& s : *slots)
      if (s.dtype != DType::f32 && s.dtype != DType::bf16 && s.dtype != DType::flex16 &&
          s.dtype != DType::u8)
        throw DTypeError(what(cat("sequence ", s.name, " is ", dtype_name(s.dtype),
                                  "; sequences are f32, bf16, flex16 or u8")));
  if (k.seq_out_value.size() != k.seq_out.size() || k.carried_next.size() != k.carried.size())
    throw ValueError(what("every sequence output and carried value needs exactly one value"));

  const int n = static_cast<int>(k.body.instrs.size());
  for (int i = 0; i < n; ++i) {
    const ir::Instr& in = k.body.instrs[static_cast<std::size_t>(i)];
    std::size_t slots = 0;
    switch (in.op) {
      case ir::Op::seq_in:
        slots = k.seq_in.size();
        break;
      case ir::Op::carried:
        slots = k.carried.size();
        break;
      case ir::Op::param:
        slots = k.params.size();
        break;
      default:
        break;
    }
    const ir::OpInfo& info = ir::op_info(in.op);
    bool ok = info.in_steps && (info.arity > 0 || in.op == ir::Op::constant ||
                                (in.slot >= 0 && static_cast<std::size_t>(in.slot) < slots));
    const int args[3] = {in.a, in.b, in.c};
    for (int j = 0; j < info.arity; ++j) ok = ok && args[j] >= 0 && args[j] < i;
    if (!ok)
      throw ValueError(what(cat("instruction %", i, " (", ir::op_info(in.op).name,
                                ") refers to a missing value or slot\n", snn::to_string(k))));
  }
  for (const std::vector<int>* ids : {&k.seq_out_value, &k.carried_next})
    for (int id : *ids)
      if (id < 0 || id >= n)
        throw ValueError(what(
            cat("an output refers to value %", id, ", which does not exist\n", snn::to_string(k))));

  std::size_t replayed = 0;
  for (const snn::SequenceSlot& s : k.seq_in) replayed += s.replayed ? 1 : 0;
  if (!k.replay) {
    if (replayed > 0) throw ValueError(what("replayed inputs need a replay"));
    return;
  }
  const snn::StepReplay& r = *k.replay;
  if (!k.reverse) throw ValueError(what("only a reverse kernel replays the forward steps"));
  if (r.values.size() != replayed || r.carried_next.size() != r.carried.size() ||
      r.carried.size() > static_cast<std::size_t>(kStepMaxSlots))
    throw ValueError(what("the replay needs one value per replayed input and carried value"));
  const int rn = static_cast<int>(r.body.instrs.size());
  for (int i = 0; i < rn; ++i) {
    const ir::Instr& in = r.body.instrs[static_cast<std::size_t>(i)];
    const ir::OpInfo& info = ir::op_info(in.op);
    bool ok = info.in_steps;
    if (in.op == ir::Op::seq_in)
      ok = in.slot >= 0 && static_cast<std::size_t>(in.slot) < k.seq_in.size() &&
           !k.seq_in[static_cast<std::size_t>(in.slot)].replayed;
    else if (in.op == ir::Op::carried)
      ok = in.slot >= 0 && static_cast<std::size_t>(in.slot) < r.carried.size();
    else if (in.op == ir::Op::param)
      ok = in.slot >= 0 && static_cast<std::size_t>(in.slot) < k.params.size();
    const int args[3] = {in.a, in.b, in.c};
    for (int j = 0; j < info.arity; ++j) ok = ok && args[j] >= 0 && args[j] < i;
    if (!ok)
      throw ValueError(what(cat("replay instruction %", i, " (", info.name,
                                ") refers to a missing value or slot\n", snn::to_string(k))));
  }
  for (const std::vector<int>* ids : {&r.values, &r.carried_next})
    for (int id : *ids)
      if (id < 0 || id >= rn)
        throw ValueError(what(cat("a replay output refers to value %", id,
                                  ", which does not exist\n", snn::to_string(k))));
}

}  // namespace flexkit::codegen
