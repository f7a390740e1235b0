#include "codegen/cuda_row_fused_source.hpp"

#include <algorithm>
#include <cstdint>

#include "codegen/code_stream.hpp"
#include "core/storage.hpp"
#include "core/text.hpp"

namespace flexkit::codegen {

using detail::cat;
using ir::Op;

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
  bool columns() const { return k_.columns; }
  bool strips() const { return k_.strips; }
  // Strips: chunks a thread holds in shared memory (after its strip_registers in registers).
  int shared_chunks() const { return k_.per_thread - k_.strip_registers; }
  // The offset of the thread's element of chunk j (rows: element k) in the array whose row
  // offset is `base`. Columns: the thread's first element and the step between its chunks
  // (cq<base>, cj<base>, see column_steps) are computed once.
  std::string at(const std::string& base, const std::string& k) const {
    return columns() ? cat("cq", base, " + (Off)j * cj", base) : cat(base, " + (Off)(", k, ")");
  }
  // Columns: the thread's element k = j * rbx + rx of the column sits at f + k * stride, the
  // layout `desc` having the column's stride at index args.rank.
  void column_steps(const std::string& base, const std::string& desc) {
    os_.line("const Off cq", base, " = ", base, " + (Off)rx * (Off)", desc,
             ".layout.strides[a.rank];");
    os_.line("const Off cj", base, " = (Off)rbx * (Off)", desc, ".layout.strides[a.rank];");
  }
  bool flex_out() const { return k_.stages[final_].target_dtype == DType::flex16; }
  const RowFusedKernel::Operand& op(int i) const { return k_.operand_info[i]; }
  std::string load(int i, const std::string& raw) const {
    return device_load(op(i).dtype, raw, cat("o", i, ".iwl"));
  }

  void header() {
    emit_kernel_preamble(os_, "row-fused expression kernel", k_.key, k_.index64);
    if (strips()) {
      os_.line("constexpr int kP = ", k_.per_thread, ";  // elements a thread holds of a column");
      os_.line("constexpr int kV = ", kRowFusedVector, ";  // neighbouring columns a thread holds");
      os_.line("constexpr int kChunks = kP;");
      os_.line("constexpr int kR = ", k_.strip_registers, ";  // of them in registers");
      os_.line("constexpr int kThreads = ", kStripThreads, ";");
      os_.line("constexpr int kTpr = ", kStripWidth, ";  // threads across the block's columns");
    } else {
      os_.line("constexpr int kP = ", k_.per_thread, ";  // row elements per thread");
      os_.line("constexpr int kV = ", columns() ? 1 : kRowFusedVector,
               ";  // elements per vector access");
      os_.line("constexpr int kChunks = kP / kV;");
    }
    os_.line("constexpr int kCluster = ", k_.cluster, ";  // blocks sharing a row");
    // Threads holding a block's partial of a reduction: one a row, one a column.
    os_.line("constexpr int kHolders = ", strips() ? "kTpr * kV" : columns() ? "32" : "1", ";");
    if (strips() && shared_chunks() > 0)
      for (int i = 0; i < n_ops_; ++i)
        if (op(i).access == Access::unit) {
          const char* type = device_type(op(i).dtype);
          os_.line("struct __align__(kV * sizeof(", type, ")) Held", i, " { ", type, " e[kV]; };");
        }
    for (int s = 0; s <= final_; ++s) {
      os_.line("typedef ", device_type(k_.stages[s].target_dtype), " Target", s, ";");
      if (k_.stages[s].reduce)
        os_.line("typedef ", reduce_policy(*k_.stages[s].reduce), " Red", s, ";");
    }
    if (n_scalars_ > 0) os_.line("struct ScalarPack { float v[", n_scalars_, "]; };");
    os_.blank();
  }

  // Operand i's value at element v of chunk j the thread holds (or its per-row value; strips:
  // the value of the thread's column v).
  std::string value(int i, const std::string& j, const std::string& v) const {
    switch (op(i).access) {
      case Access::unit:
        if (strips() && shared_chunks() > 0)
          return cat("(", j, " < kR ? rv", i, "[(", j, " < kR ? ", j, " : 0) * kV + ", v, "] : ",
                     load(i, cat("sh", i, "[(", j, " - kR) * kThreads + threadIdx.x].e[", v, "]")),
                     ")");
        return cat("rv", i, "[", j, " * kV + ", v, "]");
      case Access::zero: {
        const std::string name = op(i).temp_of >= 0 ? cat("tv", op(i).temp_of) : cat("z", i);
        return strips() ? cat(name, "[", v, "]") : name;
      }
      default:
        return cat("u", i);
    }
  }

  bool reads_kept(int stage) const { return k_.reuse && stage == final_; }
  std::string x_init(int stage) const {
    const auto& ops = k_.stages[stage].operands;
    if (ops.empty() && !reads_kept(stage)) return "{0.0f}";
    std::string s = "{";
    for (std::size_t q = 0; q < ops.size(); ++q) s += cat(q ? ", " : "", value(ops[q], "j", "v"));
    if (reads_kept(stage))
      s += cat(ops.empty() ? "" : ", ", value(k_.reuse->row_operand, "j", "v"));
    return s + "}";
  }
  std::size_t x_count(int stage) const {
    return std::max<std::size_t>(1, k_.stages[stage].operands.size() + (reads_kept(stage) ? 1 : 0));
  }

  void kernel() {
    if (strips()) {
      os_.line("// kV neighbouring columns a thread (kTpr * kV a block), split over 32 row");
      os_.line("// positions and the cluster's blocks: each thread holds kR elements of its");
      os_.line("// columns in registers and the rest in shared memory, loaded once; every");
      os_.line("// reduction runs over them and the last stage writes the columns.");
    } else if (columns()) {
      os_.line("// A column per lane (32 neighbouring columns a block), split over the block's");
      os_.line("// warps and the cluster's blocks: the column operands are loaded into registers");
      os_.line("// once, every reduction runs over them, the last stage writes the column.");
    } else {
      os_.line("// A row per bx threads (by rows per block): the row operands are loaded into");
      os_.line("// registers once, every reduction runs over them, the last stage writes the row.");
    }
    // 64 registers a thread whatever the block's size (strips: two blocks a multiprocessor).
    const std::string bounds =
        strips() ? cat(kStripThreads, ", ", 1024 / kStripThreads) : cat(kRowFusedMaxThreads, ", 1");
    std::string sig = cat("FLEXKIT_KERNEL void ",
                          k_.cluster > 1 ? cat("__cluster_dims__(", k_.cluster, ", 1, 1) ") : "",
                          "__launch_bounds__(", bounds, ") ", kRowFusedKernel, "(");
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
    if (strips() && shared_chunks() > 0) {
      os_.line("extern __shared__ __align__(16) unsigned char held[];");
      std::int64_t offset = 0;
      for (int i = 0; i < n_ops_; ++i) {
        if (op(i).access != Access::unit) continue;
        os_.line("Held", i, "* const sh", i, " = reinterpret_cast<Held", i, "*>(held + ", offset,
                 ");");
        offset += static_cast<std::int64_t>(shared_chunks()) * kStripThreads * kRowFusedVector *
                  static_cast<std::int64_t>(itemsize(op(i).dtype));
      }
    }
    if (flex_out())
      os_.line("StatsLocal st = {0, 0ull, 0ull};");
    else
      os_.line("(void)stats;");
    os_.line("const int rank = (int)blockIdx.x % kCluster;  // the block's place in its cluster");
    if (strips()) {
      os_.line("const int tx = (int)threadIdx.x % kTpr;");
      os_.line("const int ty = (int)threadIdx.x / kTpr;  // the thread's row position");
      os_.line("const int rx = rank * (kThreads / kTpr) + ty;  // its place in the column's");
      os_.line("const int rbx = (kThreads / kTpr) * kCluster;  // threads of a column");
    } else if (columns()) {
      os_.line("const int lane = (int)threadIdx.x & 31;");
      os_.line("const int warp = (int)threadIdx.x >> 5;");
      os_.line("const int warps = (int)blockDim.x >> 5;");
      os_.line("const int rx = rank * warps + warp;  // the thread's place in the column's");
      os_.line("const int rbx = warps * kCluster;    // threads of a column");
    } else {
      os_.line("const int bx = a.block_x;");
      os_.line("const int tx = (int)threadIdx.x % bx;");
      os_.line("const int ty = (int)threadIdx.x / bx;");
      os_.line("const int by = (int)blockDim.x / bx;");
      os_.line("const int rx = rank * bx + tx;  // the thread's place in the row's threads");
      os_.line("const int rbx = bx * kCluster;  // threads of a row");
    }
    os_.line("const Idx rows = (Idx)a.n;");
    os_.line("const Idx len = (Idx)a.k;");
    os_.line("const Idx row = (Idx)(blockIdx.x / kCluster) * (Idx)",
             strips()    ? "(kTpr * kV) + (Idx)tx * kV;  // the first of the thread's columns"
             : columns() ? "32 + (Idx)lane;"
                         : "by + (Idx)ty;");
    os_.line("const bool active = row < rows;");
    unravel();
    for (int i = 0; i < n_ops_; ++i) {
      if (op(i).access != Access::zero || op(i).temp_of >= 0) continue;
      if (!strips()) {
        os_.line("const float z", i, " = active ? ", load(i, cat("p", i, "[f", i, "]")),
                 " : 0.0f;");
        continue;
      }
      // The thread's columns are neighbours along the row space's last axis.
      os_.line("float z", i, "[kV];");
      os_.line("#pragma unroll");
      os_.line("for (int v = 0; v < kV; ++v)");
      os_.line(
          "  z", i, "[v] = active ? ",
          load(i, cat("p", i, "[f", i, " + (Off)v * (Off)o", i, ".layout.strides[a.rank - 1]]")),
          " : 0.0f;");
    }
    if (columns()) {
      column_steps(cat("ft", final_), cat("t", final_));
      for (int i = 0; i < n_ops_; ++i)
        if (op(i).access == Access::unit) column_steps(cat("f", i), cat("o", i));
    }
    // Where every chunk of every thread of the block (and cluster) is in range, the stages run
    // without a check per element: the common case of lengths that fill the threads exactly.
    if (strips()) {
      os_.line("const bool full = len == (Idx)kChunks * (Idx)rbx && ",
               "(Idx)(blockIdx.x / kCluster + 1) * (Idx)(kTpr * kV) <= rows;");
    } else if (columns()) {
      os_.line("const bool full = len == (Idx)kChunks * (Idx)rbx && ",
               "(Idx)(blockIdx.x / kCluster) * (Idx)32 + (Idx)32 <= rows;");
    } else {
      os_.line("const bool full = a.vec && len == (Idx)kChunks * (Idx)rbx * (Idx)kV && ",
               "(Idx)(blockIdx.x / kCluster) * (Idx)by + (Idx)by <= rows;");
    }
    for (const bool full : {true, false}) {
      full_ = full;
      CodeStream::Scope branch(os_, full ? "if (full)" : "else");
      load_rows();
      for (int s = 0; s < final_; ++s) reduction(s);
      final_stage();
    }
    if (flex_out()) os_.line("commit_stats(st, stats);");
    // The cluster's blocks read one another's partials: none leaves before all have read them.
    if (k_.cluster > 1) os_.line("cluster_wait();");
  }

  // Offsets of the row in every array read or written (row 0 for inactive threads).
  void unravel() {
    os_.line("Idx rem = active ? row : 0;");
    for (int d = rank_ - 1; d > 0; --d) {
      if (k_.index64) {
        os_.line("const Idx c", d, " = rem % (Idx)a.shape[", d, "];");
        os_.line("rem /= (Idx)a.shape[", d, "];");
        continue;
      }
      os_.line("const Idx q", d, " = divide_index(rem, a.dividers[", d, "]);");
      os_.line("const Idx c", d, " = rem - q", d, " * (Idx)a.shape[", d, "];");
      os_.line("rem = q", d, ";");
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

  // Strips: the chunks past kR go to shared memory by asynchronous copies, all issued before
  // the register chunks are loaded; each thread waits for its own copies only.
  void load_strips() {
    const std::string in_range = full_ ? "" : "if (active && k < len) ";
    for (int i = 0; i < n_ops_; ++i) {
      if (op(i).access != Access::unit || shared_chunks() == 0) continue;
      os_.line("#pragma unroll");
      CodeStream::Scope chunks(os_, "for (int j = kR; j < kChunks; ++j)");
      if (!full_) os_.line("const Idx k = (Idx)j * (Idx)rbx + (Idx)rx;");
      os_.line(in_range, "copy_async(&sh", i, "[(j - kR) * kThreads + threadIdx.x], p", i, " + cq",
               "f", i, " + (Off)j * cjf", i, ");");
    }
    if (shared_chunks() > 0) os_.line("copy_async_commit();");
    for (int i = 0; i < n_ops_; ++i) {
      if (op(i).access != Access::unit) continue;
      const char* type = device_type(op(i).dtype);
      os_.line("float rv", i, "[kR * kV];");
      os_.line("#pragma unroll");
      CodeStream::Scope chunks(os_, "for (int j = 0; j < kR; ++j)");
      if (!full_) os_.line("const Idx k = (Idx)j * (Idx)rbx + (Idx)rx;");
      os_.line(type, " raw[kV] = {};");
      os_.line(in_range, "load_vector(p", i, " + cqf", i, " + (Off)j * cjf", i, ", raw);");
      os_.line("#pragma unroll");
      os_.line("for (int v = 0; v < kV; ++v) rv", i, "[j * kV + v] = ", load(i, "raw[v]"), ";");
    }
    if (shared_chunks() > 0) os_.line("copy_async_wait();");
  }

  void load_rows() {
    if (strips()) {
      load_strips();
      return;
    }
    for (int i = 0; i < n_ops_; ++i) {
      if (op(i).access != Access::unit) continue;
      const char* type = device_type(op(i).dtype);
      os_.line("float rv", i, "[kP];");
      os_.line("#pragma unroll");
      CodeStream::Scope chunks(os_, "for (int j = 0; j < kChunks; ++j)");
      os_.line("const Idx k = ((Idx)j * (Idx)rbx + (Idx)rx) * kV;");
      if (full_) {
        if (columns()) {
          os_.line("rv", i, "[j] = ", load(i, cat("p", i, "[", at(cat("f", i), "k"), "]")), ";");
        } else {
          os_.line(type, " raw[kV];");
          os_.line("load_vector(p", i, " + f", i, " + (Off)k, raw);");
          os_.line("#pragma unroll");
          os_.line("for (int v = 0; v < kV; ++v) rv", i, "[j * kV + v] = ", load(i, "raw[v]"), ";");
        }
        continue;
      }
      if (!columns()) {
        CodeStream::Scope vec(os_, "if (active && a.vec && k + kV <= len)");
        os_.line(type, " raw[kV];");
        os_.line("load_vector(p", i, " + f", i, " + (Off)k, raw);");
        os_.line("#pragma unroll");
        os_.line("for (int v = 0; v < kV; ++v) rv", i, "[j * kV + v] = ", load(i, "raw[v]"), ";");
        os_.line("continue;");
      }
      os_.line("#pragma unroll");
      os_.line("for (int v = 0; v < kV; ++v)");
      os_.line("  rv", i, "[j * kV + v] = active && k + (Idx)v < len ? ",
               load(i, cat("p", i, "[", at(cat("f", i), "k + (Idx)v"), "]")), " : 0.0f;");
    }
  }

  // Stage s's partial `acc` (its block's, the whole row's or column's without a cluster) combined
  // over the cluster's blocks, then stored as the stage's target dtype in raw<s>.
  void combine_and_store(int s, const std::string& acc) {
    if (k_.cluster > 1) {
      os_.line("__shared__ Red", s, "::Acc part", s, "[kHolders];");
      os_.line(acc, " = reduce_cluster<Red", s, ">(", acc, ", part", s, ", kCluster, kHolders);");
      // Arriving for the final wait once the last partials are read lets the blocks that are
      // through go on to the last stage.
      if (s + 1 == final_) os_.line("cluster_arrive();");
    }
    const Op op = *k_.stages[s].reduce;
    const DType dtype = k_.stages[s].target_dtype;
    if ((op == Op::argmax || op == Op::argmin) && dtype == DType::i32) {
      os_.line("const Target", s, " raw", s, " = (int32_t)", acc, ".index;");
    } else {
      os_.line("const Target", s, " raw", s, " = ",
               device_store(dtype, cat("Red", s, "::value(", acc, ", a.k)"), "0", "st"), ";");
    }
  }

  // Strips: stage s reduces each of the thread's kV columns, the block's row positions, then
  // the cluster's blocks; tv<s>[v] is then what loading column v's stored temporary would give.
  void reduction_strips(int s) {
    const DType dtype = k_.stages[s].target_dtype;
    os_.line("Red", s, "::Acc acc", s, "[kV];");
    os_.line("#pragma unroll");
    os_.line("for (int v = 0; v < kV; ++v) acc", s, "[v] = Red", s, "::identity();");
    os_.line("#pragma unroll");
    {
      CodeStream::Scope chunks(os_, "for (int j = 0; j < kChunks; ++j)");
      os_.line("const Idx k = (Idx)j * (Idx)rbx + (Idx)rx;");
      if (!full_) os_.line("if (!active || k >= len) continue;");
      os_.line("#pragma unroll");
      CodeStream::Scope lanes(os_, "for (int v = 0; v < kV; ++v)");
      os_.line("const float x[", x_count(s), "] = ", x_init(s), ";");
      os_.line("const float e = stage", s, "_body(x, s);");
      os_.line("acc", s, "[v] = Red", s, "::combine(acc", s, "[v], Red", s,
               "::element(e, (int64_t)k));");
    }
    // Thread h < kHolders holds column h of the block.
    os_.line("Red", s, "::Acc col", s, " = reduce_strip<Red", s, ", kV, kThreads, kTpr>(acc", s,
             ");");
    combine_and_store(s, cat("col", s));
    os_.line("Target", s, " mine", s, "[kV];");
    os_.line("broadcast_strip<Target", s, ", kV, kTpr>(raw", s, ", mine", s, ");");
    os_.line("float tv", s, "[kV];");
    os_.line("#pragma unroll");
    {
      CodeStream::Scope lanes(os_, "for (int v = 0; v < kV; ++v)");
      os_.line("tv", s, "[v] = ", device_load(dtype, cat("mine", s, "[v]"), "0"), ";");
      os_.line("if (ty == 0 && rank == 0 && active) pt", s, "[ft", s, " + (Off)v * (Off)t", s,
               ".layout.strides[a.rank - 1]] = mine", s, "[v];");
    }
  }

  // Stage s reduces the row; tv<s> is then what loading its stored temporary would give.
  void reduction(int s) {
    if (strips()) {
      reduction_strips(s);
      return;
    }
    const DType dtype = k_.stages[s].target_dtype;
    os_.line("Red", s, "::Acc acc", s, " = Red", s, "::identity();");
    os_.line("#pragma unroll");
    {
      CodeStream::Scope chunks(os_, "for (int j = 0; j < kChunks; ++j)");
      os_.line("#pragma unroll");
      CodeStream::Scope lanes(os_, "for (int v = 0; v < kV; ++v)");
      os_.line("const Idx k = ((Idx)j * (Idx)rbx + (Idx)rx) * kV + (Idx)v;");
      if (!full_) os_.line("if (!active || k >= len) continue;");
      os_.line("const float x[", x_count(s), "] = ", x_init(s), ";");
      os_.line("const float e = stage", s, "_body(x, s);");
      if (k_.reuse && k_.reuse->stage == s)  // kept for the last stage; the row is not read again
        os_.line(value(k_.reuse->row_operand, "j", "v"), " = e;");
      os_.line("acc", s, " = Red", s, "::combine(acc", s, ", Red", s, "::element(e, (int64_t)k));");
    }
    if (columns())
      os_.line("acc", s, " = reduce_columns<Red", s, ">(acc", s, ");");
    else
      os_.line("acc", s, " = reduce_row<Red", s, ">(acc", s, ", bx);");
    combine_and_store(s, cat("acc", s));
    os_.line("if (", columns() ? "warp" : "tx", " == 0 && rank == 0 && active) pt", s, "[ft", s,
             "] = raw", s, ";");
    const std::string loaded = device_load(dtype, cat("raw", s), "0");
    if (columns())
      os_.line("const float tv", s, " = broadcast_columns(", loaded, ");");
    else
      os_.line("const float tv", s, " = broadcast_row(", loaded, ", bx);");
  }

  void final_stage() {
    const int f = final_;
    if (strips()) {
      os_.line("#pragma unroll");
      CodeStream::Scope chunks(os_, "for (int j = 0; j < kChunks; ++j)");
      if (!full_) os_.line("const Idx k = (Idx)j * (Idx)rbx + (Idx)rx;");
      if (!full_) os_.line("if (!active || k >= len) continue;");
      os_.line("Target", f, " w[kV];");
      os_.line("#pragma unroll");
      {
        CodeStream::Scope lanes(os_, "for (int v = 0; v < kV; ++v)");
        os_.line("const float x[", x_count(f), "] = ", x_init(f), ";");
        os_.line("w[v] = ",
                 device_store(k_.stages[f].target_dtype, cat("stage", f, "_body(x, s)"),
                              cat("t", f, ".iwl"), "st"),
                 ";");
      }
      os_.line("store_vector(pt", f, " + cqft", f, " + (Off)j * cjft", f, ", w);");
      return;
    }
    os_.line("#pragma unroll");
    CodeStream::Scope chunks(os_, "for (int j = 0; j < kChunks; ++j)");
    os_.line("const Idx k = ((Idx)j * (Idx)rbx + (Idx)rx) * kV;");
    if (!full_) os_.line("if (!active || k >= len) continue;");
    os_.line("Target", f, " w[kV];");
    os_.line("#pragma unroll");
    {
      CodeStream::Scope lanes(os_, "for (int v = 0; v < kV; ++v)");
      if (!full_) os_.line("if (k + (Idx)v >= len) break;");
      os_.line("const float x[", x_count(f), "] = ", x_init(f), ";");
      os_.line("w[v] = ",
               device_store(k_.stages[f].target_dtype, cat("stage", f, "_body(x, s)"),
                            cat("t", f, ".iwl"), "st"),
               ";");
    }
    if (full_ && !columns()) {
      os_.line("store_vector(pt", f, " + ft", f, " + (Off)k, w);");
      return;
    }
    if (full_) {
      os_.line("pt", f, "[", at(cat("ft", f), "k"), "] = w[0];");
      return;
    }
    if (!columns()) {
      os_.line("if (a.vec && k + kV <= len) {");
      os_.line("  store_vector(pt", f, " + ft", f, " + (Off)k, w);");
      os_.line("  continue;");
      os_.line("}");
    }
    os_.line("for (int v = 0; v < kV; ++v)");
    os_.line("  if (k + (Idx)v < len) pt", f, "[", at(cat("ft", f), "k + (Idx)v"), "] = w[v];");
  }

  const RowFusedKernel& k_;
  const ir::Plan& plan_;
  const int n_ops_;
  const int n_scalars_;
  const int rank_;
  const int final_;
  bool full_ = false;  // emitting the body for blocks whose every element is in range
  CodeStream os_;
};

}  // namespace

std::string generate_row_fused_source(const RowFusedKernel& kernel, const ir::Plan& plan) {
  return RowFusedGenerator(kernel, plan).run();
}

}  // namespace flexkit::codegen
