#include "codegen/cuda_row_fused_source.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "codegen/code_stream.hpp"
#include "core/storage.hpp"
#include "core/text.hpp"

namespace flexkit::codegen {

using detail::cat;
using ir::Op;

namespace {

constexpr std::int64_t kIndex32Limit = std::int64_t{1} << 31;
constexpr int kVector = 4;  // elements per vector access

bool same_view(const Array& a, const Array& b) {
  return a.shares_storage(b) && a.data() == b.data() && a.dtype() == b.dtype() &&
         a.shape() == b.shape() && a.strides() == b.strides();
}

StridedLayout without_last(const StridedLayout& l) {
  StridedLayout out = l;
  out.rank = l.rank - 1;
  return out;
}

std::int64_t extent(const StridedLayout& l) {
  std::int64_t e = 0;
  for (int d = 0; d < l.rank; ++d) e += (l.shape[d] - 1) * std::llabs(l.strides[d]);
  return e;
}

bool aligned(const void* data, DType dtype, const StridedLayout& row_space) {
  const auto size = static_cast<std::int64_t>(itemsize(dtype));
  const std::int64_t align = std::min<std::int64_t>(16, kVector * size);
  if (reinterpret_cast<std::uintptr_t>(data) % static_cast<std::uintptr_t>(align) != 0)
    return false;
  for (int d = 0; d < row_space.rank; ++d)
    if ((row_space.strides[d] * size) % align != 0) return false;
  return true;
}

std::string make_key(const RowFusedKernel& k, const ir::Plan& plan) {
  using std::to_string;
  std::string key = "rf1|P" + to_string(k.per_thread) + "|r" + to_string(k.args.rank) +
                    (k.index64 ? "|i64|o" : "|i32|o");
  for (const auto& o : k.operand_info) {
    key += dtype_name(o.dtype);
    key += ':';
    key += access_code(o.access);
    key += ':' + to_string(o.temp_of) + ',';
  }
  if (k.reuse)
    key += "|reuse" + to_string(k.reuse->stage) + ',' + to_string(k.reuse->instruction) + ',' +
           to_string(k.reuse->row_operand);
  for (std::size_t s = 0; s < k.stages.size(); ++s) {
    const RowFusedKernel::Stage& st = k.stages[s];
    key += '|';
    key += st.reduce ? op_info(*st.reduce).name : "ew";
    key += ':';
    key += dtype_name(st.target_dtype);
    key += ":m";
    for (int i : st.operands) key += to_string(i) + ',';
    key += ":s" + to_string(st.scalar_offset) + ":c";
    for (const ir::Instr& in : plan.stages[s].body.code) {
      key += op_info(in.op).name;
      key += '(' + to_string(in.a) + ',' + to_string(in.b) + ',' + to_string(in.c) + ',' +
             to_string(in.slot) + ')';
    }
  }
  return key;
}

// Whether instruction ia of stage sa's program and ib of stage sb's compute the same value: the
// same operations over the same fused operands, scalar values and constants.
bool same_value(const RowFusedKernel& k, const ir::Plan& plan, int sa, int ia, int sb, int ib) {
  const ir::Instr& a = plan.stages[sa].body.code[ia];
  const ir::Instr& b = plan.stages[sb].body.code[ib];
  if (a.op != b.op) return false;
  switch (a.op) {
    case Op::operand:
      return k.stages[sa].operands[a.slot] == k.stages[sb].operands[b.slot];
    case Op::scalar:
      return k.scalars[k.stages[sa].scalar_offset + a.slot] ==
             k.scalars[k.stages[sb].scalar_offset + b.slot];
    case Op::constant:
      return a.constant == b.constant;
    default:
      break;
  }
  if (a.op == Op::spike_grad && (a.surrogate != b.surrogate || a.alpha != b.alpha)) return false;
  for (auto arg : {&ir::Instr::a, &ir::Instr::b, &ir::Instr::c}) {
    if ((a.*arg < 0) != (b.*arg < 0)) return false;
    if (a.*arg >= 0 && !same_value(k, plan, sa, a.*arg, sb, b.*arg)) return false;
  }
  return true;
}

// The fused operands the last stage still reads when instruction `cut` is given to it.
std::vector<bool> read_with_cut(const RowFusedKernel& k, const ir::Plan& plan, int cut) {
  const int last = static_cast<int>(plan.stages.size()) - 1;
  const std::vector<ir::Instr>& code = plan.stages[last].body.code;
  std::vector<bool> live(code.size(), false), read(k.operand_info.size(), false);
  live.back() = true;
  for (int i = static_cast<int>(code.size()) - 1; i >= 0; --i) {
    if (!live[i] || i == cut) continue;
    const ir::Instr& in = code[i];
    if (in.op == Op::operand) read[k.stages[last].operands[in.slot]] = true;
    for (int arg : {in.a, in.b, in.c})
      if (arg >= 0) live[arg] = true;
  }
  return read;
}

// A reduction's element the last stage computes again, and a row operand's registers to keep it
// in (one no stage reads after that reduction): see RowFusedKernel::Reuse.
std::optional<RowFusedKernel::Reuse> find_reuse(const RowFusedKernel& k, const ir::Plan& plan) {
  const int last = static_cast<int>(plan.stages.size()) - 1;
  const std::vector<ir::Instr>& code = plan.stages[last].body.code;
  for (int s = last - 1; s >= 0; --s) {
    const int root = static_cast<int>(plan.stages[s].body.code.size()) - 1;
    if (!ir::is_elementwise(plan.stages[s].body.code[root].op)) continue;
    for (int i = static_cast<int>(code.size()) - 1; i >= 0; --i) {
      if (!same_value(k, plan, last, i, s, root)) continue;
      const std::vector<bool> read = read_with_cut(k, plan, i);
      for (int u = 0; u < static_cast<int>(k.operand_info.size()); ++u) {
        if (k.operand_info[u].access != Access::unit || read[u]) continue;
        bool later = false;  // a reduction after s reads the registers
        for (int t = s + 1; t < last; ++t)
          for (int o : k.stages[t].operands) later = later || o == u;
        if (!later) return RowFusedKernel::Reuse{s, i, u};
      }
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<RowFusedKernel> describe_row_fused(const ir::Plan& plan) {
  const auto& stages = plan.stages;
  if (stages.size() < 2) return std::nullopt;
  const ir::Stage& last = stages.back();
  if (last.reduce || !last.target.defined()) return std::nullopt;
  const Shape& shape = last.body.shape;
  const int rank = static_cast<int>(shape.size());
  if (rank < 1 || shape.back() < 2 || shape_numel(shape) == 0) return std::nullopt;
  const std::int64_t len = shape.back();
  const std::int64_t rows = shape_numel(shape) / len;
  const Array& out = last.target;
  if (out.shape() != shape || out.dtype() == DType::f64 || out.strides().back() != 1)
    return std::nullopt;
  if (out.dtype() == DType::flex16 && last.iwl_policy == IwlPolicy::exact) return std::nullopt;
  Shape reduced = shape;
  reduced.back() = 1;
  for (std::size_t s = 0; s + 1 < stages.size(); ++s) {
    const ir::Stage& st = stages[s];
    if (!st.reduce || st.axis != rank - 1 || st.body.shape != shape || !st.target.defined() ||
        st.target.shape() != reduced ||
        (st.target.dtype() != DType::f32 && st.target.dtype() != DType::i32))
      return std::nullopt;
  }

  for (const ir::Stage& st : stages)
    if (!program_error(st.body).empty()) return std::nullopt;  // the stage path reports it

  RowFusedKernel k;
  std::vector<Array> arrays;
  int scalars = 0;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const ir::Stage& st = stages[s];
    RowFusedKernel::Stage part{st.reduce, st.target.dtype(), {}, scalars};
    for (const Array& a : st.body.operands) {
      if (a.dtype() == DType::f64 || a.shape() != shape) return std::nullopt;
      int temp = -1;
      for (std::size_t e = 0; e < stages.size(); ++e) {
        if (!a.shares_storage(stages[e].target) || e + 1 == stages.size()) continue;
        if (e >= s) return std::nullopt;  // read before it is written
        temp = static_cast<int>(e);
      }
      // Another block writes rows this one may read: only the very element written is safe.
      if (a.shares_storage(out) && !same_view(a, out)) return std::nullopt;
      int index = -1;
      for (std::size_t i = 0; i < arrays.size(); ++i)
        if (same_view(arrays[i], a)) index = static_cast<int>(i);
      if (index < 0) {
        const StridedLayout l = ArrayAccess::layout(a);
        const std::int64_t along = l.strides[rank - 1];
        bool all_zero = true;
        for (int d = 0; d < rank; ++d) all_zero = all_zero && l.strides[d] == 0;
        Access access;
        if (temp >= 0 && along == 0)
          access = Access::zero;
        else if (temp >= 0)
          return std::nullopt;
        else if (along == 1)
          access = Access::unit;
        else if (along == 0)
          access = all_zero ? Access::uniform : Access::zero;
        else
          return std::nullopt;
        index = static_cast<int>(arrays.size());
        arrays.push_back(a);
        k.operand_info.push_back({a.dtype(), access, temp});
      }
      part.operands.push_back(index);
    }
    for (double v : st.body.scalars) k.scalars.push_back(static_cast<float>(v));
    scalars += static_cast<int>(st.body.scalars.size());
    k.stages.push_back(part);
  }

  int row_operands = 0;
  for (const auto& o : k.operand_info) row_operands += o.access == Access::unit;
  if (row_operands > kRowFusedRegisters / kVector) return std::nullopt;
  k.per_thread = row_operands <= 1
                     ? kRowFusedRegisters
                     : std::max(kVector, kRowFusedRegisters / row_operands / kVector * kVector);
  if ((len + k.per_thread - 1) / k.per_thread > kRowFusedMaxThreads) return std::nullopt;

  // The row space: every axis but the last, coalesced over targets and operands together.
  std::vector<StridedLayout> layouts;
  for (const ir::Stage& st : stages)
    layouts.push_back(without_last(ArrayAccess::layout(st.target)));
  for (const Array& a : arrays) layouts.push_back(without_last(ArrayAccess::layout(a)));
  portable::coalesce_layouts(layouts.data(), static_cast<int>(layouts.size()));
  bool fits32 = rows * len < kIndex32Limit;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    ExprOperand t{};
    t.data = stages[s].target.data();
    t.iwl = stages[s].target.dtype() == DType::flex16 ? stages[s].target.iwl() : 0;
    t.layout = layouts[s];
    k.targets.push_back(t);
    fits32 = fits32 && extent(layouts[s]) + len < kIndex32Limit;
  }
  bool vec = aligned(out.data(), out.dtype(), layouts[stages.size() - 1]);
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    const StridedLayout& l = layouts[stages.size() + i];
    ExprOperand o{};
    o.data = arrays[i].data();
    o.iwl = arrays[i].dtype() == DType::flex16 ? arrays[i].iwl() : 0;
    o.layout = l;
    k.operands.push_back(o);
    fits32 = fits32 && extent(l) + len < kIndex32Limit;
    if (k.operand_info[i].access == Access::unit)
      vec = vec && aligned(o.data, arrays[i].dtype(), l);
  }
  k.index64 = !fits32;
  k.vector_ok = vec;
  k.args.n = rows;
  k.args.k = len;
  k.args.rank = layouts[0].rank;
  for (int d = 0; d < layouts[0].rank; ++d) k.args.shape[d] = layouts[0].shape[d];

  const std::size_t parameter_bytes = sizeof(ExprOperand) * (arrays.size() + stages.size()) +
                                      sizeof(float) * k.scalars.size() + sizeof(ExprArgs) +
                                      sizeof(void*);
  if (parameter_bytes > kMaxParameterBytes) return std::nullopt;
  k.reuse = find_reuse(k, plan);
  k.key = make_key(k, plan);
  return k;
}

namespace {

class RowFusedGenerator {
 public:
  RowFusedGenerator(const RowFusedKernel& k, const ir::Plan& plan)
      : k_(k),
        plan_(plan),
        n_ops_(static_cast<int>(k.operand_info.size())),
        n_scalars_(static_cast<int>(k.scalars.size())),
        rank_(k.args.rank),
        final_(static_cast<int>(k.stages.size()) - 1) {}

  std::string run() {
    header();
    for (int s = 0; s <= final_; ++s)
      emit_program_function(os_, cat("stage", s, "_body"), body(s), k_.stages[s].scalar_offset,
                            s_count());
    kernel();
    return os_.str();
  }

 private:
  int s_count() const { return n_scalars_ > 0 ? n_scalars_ : 1; }

  // Stage s's program; with a reuse, the last stage's reads the kept element as one more
  // operand slot in place of the instruction computing it (what it fed is then dead code).
  ir::Program body(int s) const {
    ir::Program p = plan_.stages[s].body;
    if (s == final_ && k_.reuse) {
      ir::Instr kept;
      kept.op = Op::operand;
      kept.slot = static_cast<std::int32_t>(p.operands.size());
      p.code[k_.reuse->instruction] = kept;
      p.operands.push_back(Array());  // only counted: x gets one more entry
    }
    return p;
  }
  bool flex_out() const { return k_.stages[final_].target_dtype == DType::flex16; }
  const RowFusedKernel::Operand& op(int i) const { return k_.operand_info[i]; }
  std::string load(int i, const std::string& raw) const {
    return device_load(op(i).dtype, raw, cat("o", i, ".iwl"));
  }

  void header() {
    emit_kernel_preamble(os_, "row-fused expression kernel", k_.key, k_.index64);
    os_.line("constexpr int kP = ", k_.per_thread, ";  // row elements per thread");
    os_.line("constexpr int kV = ", kVector, ";  // elements per vector access");
    os_.line("constexpr int kChunks = kP / kV;");
    for (int s = 0; s <= final_; ++s) {
      os_.line("typedef ", device_type(k_.stages[s].target_dtype), " Target", s, ";");
      if (k_.stages[s].reduce)
        os_.line("typedef ", reduce_policy(*k_.stages[s].reduce), " Red", s, ";");
    }
    if (n_scalars_ > 0) os_.line("struct ScalarPack { float v[", n_scalars_, "]; };");
    os_.blank();
  }

  // Operand i's value at register slot `slot` of the row (or its per-row value).
  std::string value(int i, const std::string& slot) const {
    switch (op(i).access) {
      case Access::unit:
        return cat("rv", i, "[", slot, "]");
      case Access::zero:
        return op(i).temp_of >= 0 ? cat("tv", op(i).temp_of) : cat("z", i);
      default:
        return cat("u", i);
    }
  }

  bool reads_kept(int stage) const { return k_.reuse && stage == final_; }
  std::string x_init(int stage, const std::string& slot) const {
    const auto& ops = k_.stages[stage].operands;
    if (ops.empty() && !reads_kept(stage)) return "{0.0f}";
    std::string s = "{";
    for (std::size_t q = 0; q < ops.size(); ++q) s += cat(q ? ", " : "", value(ops[q], slot));
    if (reads_kept(stage)) s += cat(ops.empty() ? "" : ", ", value(k_.reuse->row_operand, slot));
    return s + "}";
  }
  std::size_t x_count(int stage) const {
    return std::max<std::size_t>(1, k_.stages[stage].operands.size() + (reads_kept(stage) ? 1 : 0));
  }

  void kernel() {
    os_.line("// A row per bx threads (by rows per block): the row operands are loaded into");
    os_.line("// registers once, every reduction runs over them, the last stage writes the row.");
    std::string sig = cat("FLEXKIT_KERNEL void __launch_bounds__(", kRowFusedMaxThreads, ", 1) ",
                          kRowFusedKernel, "(");
    for (int i = 0; i < n_ops_; ++i) sig += cat("ExprOperand o", i, ", ");
    for (int s = 0; s <= final_; ++s) sig += cat("ExprOperand t", s, ", ");
    if (n_scalars_ > 0) sig += "ScalarPack sp, ";
    sig += "ExprArgs a, ExprStats* stats)";
    CodeStream::Scope fn(os_, sig);
    os_.line("float s[", s_count(), "];");
    if (n_scalars_ == 0) os_.line("s[0] = 0.0f;");
    for (int i = 0; i < n_scalars_; ++i) os_.line("s[", i, "] = sp.v[", i, "];");
    for (int i = 0; i < n_ops_; ++i) {
      if (op(i).temp_of >= 0) continue;
      const char* type = device_type(op(i).dtype);
      os_.line("const ", type, "* p", i, " = static_cast<const ", type, "*>(o", i, ".data);");
      if (op(i).access == Access::uniform)
        os_.line("const float u", i, " = ", load(i, cat("p", i, "[0]")), ";");
    }
    for (int s = 0; s <= final_; ++s)
      os_.line("Target", s, "* pt", s, " = static_cast<Target", s, "*>(const_cast<void*>(t", s,
               ".data));");
    if (flex_out())
      os_.line("StatsLocal st = {0, 0ull, 0ull};");
    else
      os_.line("(void)stats;");
    os_.line("const int bx = a.block_x;");
    os_.line("const int tx = (int)threadIdx.x % bx;");
    os_.line("const int ty = (int)threadIdx.x / bx;");
    os_.line("const int by = (int)blockDim.x / bx;");
    os_.line("const Idx rows = (Idx)a.n;");
    os_.line("const Idx len = (Idx)a.k;");
    os_.line("const Idx row = (Idx)blockIdx.x * (Idx)by + (Idx)ty;");
    os_.line("const bool active = row < rows;");
    unravel();
    for (int i = 0; i < n_ops_; ++i)
      if (op(i).access == Access::zero && op(i).temp_of < 0)
        os_.line("const float z", i, " = active ? ", load(i, cat("p", i, "[f", i, "]")),
                 " : 0.0f;");
    load_rows();
    for (int s = 0; s < final_; ++s) reduction(s);
    final_stage();
    if (flex_out()) os_.line("commit_stats(st, stats);");
  }

  // Offsets of the row in every array read or written (row 0 for inactive threads).
  void unravel() {
    os_.line("Idx rem = active ? row : 0;");
    for (int d = rank_ - 1; d > 0; --d) {
      os_.line("const Idx c", d, " = rem % (Idx)a.shape[", d, "];");
      os_.line("rem /= (Idx)a.shape[", d, "];");
    }
    if (rank_ > 0) os_.line("const Idx c0 = rem;");
    os_.line("(void)rem;");
    auto offset = [&](const std::string& name, const std::string& desc) {
      std::string sum = rank_ == 0 ? "0" : "";
      for (int d = 0; d < rank_; ++d)
        sum += cat(d ? " + " : "", "(Off)c", d, " * (Off)", desc, ".layout.strides[", d, "]");
      os_.line("const Off ", name, " = ", sum, ";");
    };
    for (int s = 0; s <= final_; ++s) offset(cat("ft", s), cat("t", s));
    for (int i = 0; i < n_ops_; ++i)
      if (op(i).temp_of < 0 && op(i).access != Access::uniform) offset(cat("f", i), cat("o", i));
  }

  void load_rows() {
    for (int i = 0; i < n_ops_; ++i) {
      if (op(i).access != Access::unit) continue;
      const char* type = device_type(op(i).dtype);
      os_.line("float rv", i, "[kP];");
      os_.line("#pragma unroll");
      CodeStream::Scope chunks(os_, "for (int j = 0; j < kChunks; ++j)");
      os_.line("const Idx k = ((Idx)j * (Idx)bx + (Idx)tx) * kV;");
      {
        CodeStream::Scope vec(os_, "if (active && a.vec && k + kV <= len)");
        os_.line(type, " raw[kV];");
        os_.line("load_vector(p", i, " + f", i, " + (Off)k, raw);");
        os_.line("#pragma unroll");
        os_.line("for (int v = 0; v < kV; ++v) rv", i, "[j * kV + v] = ", load(i, "raw[v]"), ";");
      }
      CodeStream::Scope scalar(os_, "else");
      os_.line("#pragma unroll");
      os_.line("for (int v = 0; v < kV; ++v)");
      os_.line("  rv", i, "[j * kV + v] = active && k + (Idx)v < len ? ",
               load(i, cat("p", i, "[f", i, " + (Off)(k + (Idx)v)]")), " : 0.0f;");
    }
  }

  // Stage s reduces the row; tv<s> is then what loading its stored temporary would give.
  void reduction(int s) {
    const bool arg = *k_.stages[s].reduce == Op::argmax || *k_.stages[s].reduce == Op::argmin;
    const DType dtype = k_.stages[s].target_dtype;
    os_.line("Red", s, "::Acc acc", s, " = Red", s, "::identity();");
    os_.line("#pragma unroll");
    {
      CodeStream::Scope chunks(os_, "for (int j = 0; j < kChunks; ++j)");
      os_.line("#pragma unroll");
      CodeStream::Scope lanes(os_, "for (int v = 0; v < kV; ++v)");
      os_.line("const Idx k = ((Idx)j * (Idx)bx + (Idx)tx) * kV + (Idx)v;");
      os_.line("if (!active || k >= len) continue;");
      os_.line("const float x[", x_count(s), "] = ", x_init(s, "j * kV + v"), ";");
      os_.line("const float e = stage", s, "_body(x, s);");
      if (k_.reuse && k_.reuse->stage == s)  // kept for the last stage; the row is not read again
        os_.line(value(k_.reuse->row_operand, "j * kV + v"), " = e;");
      os_.line("acc", s, " = Red", s, "::combine(acc", s, ", Red", s, "::element(e, (int64_t)k));");
    }
    os_.line("acc", s, " = reduce_row<Red", s, ">(acc", s, ", bx);");
    if (arg && dtype == DType::i32) {
      os_.line("const Target", s, " raw", s, " = (int32_t)acc", s, ".index;");
    } else {
      os_.line("const Target", s, " raw", s, " = ",
               device_store(dtype, cat("Red", s, "::value(acc", s, ", a.k)"), "0", "st"), ";");
    }
    os_.line("if (tx == 0 && active) pt", s, "[ft", s, "] = raw", s, ";");
    os_.line("const float tv", s, " = broadcast_row(", device_load(dtype, cat("raw", s), "0"),
             ", bx);");
  }

  void final_stage() {
    const int f = final_;
    os_.line("#pragma unroll");
    CodeStream::Scope chunks(os_, "for (int j = 0; j < kChunks; ++j)");
    os_.line("const Idx k = ((Idx)j * (Idx)bx + (Idx)tx) * kV;");
    os_.line("if (!active || k >= len) continue;");
    os_.line("Target", f, " w[kV];");
    os_.line("#pragma unroll");
    {
      CodeStream::Scope lanes(os_, "for (int v = 0; v < kV; ++v)");
      os_.line("if (k + (Idx)v >= len) break;");
      os_.line("const float x[", x_count(f), "] = ", x_init(f, "j * kV + v"), ";");
      os_.line("w[v] = ",
               device_store(k_.stages[f].target_dtype, cat("stage", f, "_body(x, s)"),
                            cat("t", f, ".iwl"), "st"),
               ";");
    }
    os_.line("if (a.vec && k + kV <= len)");
    os_.line("  store_vector(pt", f, " + ft", f, " + (Off)k, w);");
    os_.line("else");
    os_.line("  for (int v = 0; v < kV; ++v)");
    os_.line("    if (k + (Idx)v < len) pt", f, "[ft", f, " + (Off)(k + (Idx)v)] = w[v];");
  }

  const RowFusedKernel& k_;
  const ir::Plan& plan_;
  const int n_ops_;
  const int n_scalars_;
  const int rank_;
  const int final_;
  CodeStream os_;
};

std::int64_t pow2_at_least(std::int64_t v) {
  std::int64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

}  // namespace

std::string generate_row_fused_source(const RowFusedKernel& kernel, const ir::Plan& plan) {
  return RowFusedGenerator(kernel, plan).run();
}

RowFusedLaunch plan_row_fused_launch(const RowFusedKernel& k) {
  RowFusedLaunch l;
  l.args = k.args;
  const std::int64_t threads = std::clamp<std::int64_t>(
      pow2_at_least((k.args.k + k.per_thread - 1) / k.per_thread), 1, kRowFusedMaxThreads);
  const std::int64_t rows_per_block = threads <= 32 ? 256 / threads : 1;
  l.shape.block_x = static_cast<unsigned>(threads);
  l.shape.block_y = static_cast<unsigned>(rows_per_block);
  l.shape.grid_x = static_cast<unsigned>((k.args.n + rows_per_block - 1) / rows_per_block);
  l.args.block_x = static_cast<std::int32_t>(threads);
  l.args.grid_x = l.shape.grid_x;
  l.args.vec = k.vector_ok ? 1 : 0;
  l.args.splits = 1;
  return l;
}

}  // namespace flexkit::codegen
