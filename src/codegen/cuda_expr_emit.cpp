// The CUDA C++ program of a described expression stage: the expression as a device function, then
// the main kernel of the stage's kind (elementwise, row or column reduction) and, for reductions,
// the kernel that combines split partials in a fixed order.
#include "codegen/cuda_expr_source.hpp"

#include <string>

#include "codegen/code_stream.hpp"
#include "core/text.hpp"

namespace flexkit::codegen {

using detail::cat;
using ir::Op;

namespace {

bool is_arg(Op op) {
  return op == Op::argmax || op == Op::argmin;
}

class Generator {
 public:
  Generator(const ExprKernel& k, const ir::Program& body)
      : k_(k),
        body_(body),
        n_ops_(static_cast<int>(k.operand_dtypes.size())),
        n_scalars_(static_cast<int>(body.scalars.size())),
        rank_(k.args.rank) {}

  std::string run() {
    header();
    expr_body();
    switch (k_.kind) {
      case KernelKind::ew_contiguous:
        elementwise(false);
        break;
      case KernelKind::ew_strided:
        elementwise(true);
        break;
      case KernelKind::reduce_rows:
        reduce_rows();
        combine();
        break;
      case KernelKind::reduce_columns:
        reduce_columns();
        combine();
        break;
    }
    return os_.str();
  }

 private:
  bool flex_target() const { return k_.target_dtype == DType::flex16; }
  bool arg_to_int() const {
    return k_.reduce && is_arg(*k_.reduce) && k_.target_dtype == DType::i32;
  }
  int x_count() const { return n_ops_ > 0 ? n_ops_ : 1; }
  int s_count() const { return n_scalars_ > 0 ? n_scalars_ : 1; }

  // raw element of operand i → float
  std::string load(int i, const std::string& raw) const {
    return device_load(k_.operand_dtypes[i], raw, cat("o", i, ".iwl"));
  }
  // float → the target's element
  // The store of value v at `offset` elements from the target view's first element (the
  // offset seeds a stochastic rounding).
  std::string store(const std::string& v, const std::string& offset) const {
    if (k_.stochastic)
      return cat("encode_flex16_sr(", v, ", t.iwl, a.seed, (int64_t)(", offset, "), st)");
    return device_store(k_.target_dtype, v, "t.iwl", "st");
  }

  void header() {
    emit_kernel_preamble(os_, "fused expression kernel", k_.key, k_.index64);
    if (k_.kind == KernelKind::reduce_columns)
      os_.line("constexpr int kCv = ", kColumnVector, ";");
    else
      os_.line("constexpr int kEpt = ", k_.elements_per_thread, ";");
    os_.line("typedef ", device_type(k_.target_dtype), " TargetT;");
    if (k_.reduce) os_.line("typedef ", reduce_policy(*k_.reduce), " Red;");
    if (n_scalars_ > 0 && !k_.descriptors_in_memory)
      os_.line("struct ScalarPack { float v[", n_scalars_, "]; };");
    os_.blank();
  }

  void expr_body() {
    os_.line("// The expression at one position: x holds the operands' values, s the scalars.");
    emit_program_function(os_, "expr_body", body_, 0, s_count());
  }

  // Main kernel: (t, operands..., [scalars], a, partials, stats). The launch bounds keep every
  // kernel at <= 64 registers, so plan_launch knows how many threads are resident per SM.
  std::string main_signature() const {
    const char* bounds = k_.kind == KernelKind::reduce_rows ? "__launch_bounds__(512, 2)"
                                                            : "__launch_bounds__(256, 4)";
    std::string s = cat("FLEXKIT_KERNEL void ", bounds, " ", kMainKernel, "(ExprOperand t");
    if (k_.descriptors_in_memory) {
      s += ", const ExprOperand* ob, const float* sb";
    } else {
      for (int i = 0; i < n_ops_; ++i) s += cat(", ExprOperand o", i);
      if (n_scalars_ > 0) s += ", ScalarPack sp";
    }
    return s + ", ExprArgs a, void* partials, ExprStats* stats)";
  }

  // Scalars, typed pointers, and operands read once per thread.
  void prologue() {
    if (k_.descriptors_in_memory)
      for (int i = 0; i < n_ops_; ++i) os_.line("const ExprOperand& o", i, " = ob[", i, "];");
    os_.line("float s[", s_count(), "];");
    if (n_scalars_ == 0)
      os_.line("s[0] = 0.0f;");
    else
      for (int i = 0; i < n_scalars_; ++i)
        os_.line("s[", i, "] = ", k_.descriptors_in_memory ? "sb[" : "sp.v[", i, "];");
    os_.line("TargetT* pt = static_cast<TargetT*>(const_cast<void*>(t.data));");
    for (int i = 0; i < n_ops_; ++i) {
      const char* type = device_type(k_.operand_dtypes[i]);
      os_.line("const ", type, "* p", i, " = static_cast<const ", type, "*>(o", i, ".data);");
    }
    for (int i = 0; i < n_ops_; ++i)
      if (k_.access[i] == Access::uniform)
        os_.line("const float u", i, " = ", load(i, cat("p", i, "[0]")), ";");
    if (flex_target()) os_.line("StatsLocal st = {0, 0ull, 0ull};");
    os_.line("(void)s;");
    os_.line("(void)pt;");
  }

  // Multi-index of `linear` over the iteration space, then the element offset of every
  // non-uniform operand (f<i>) and, when `target`, of the target (ft).
  void unravel(const std::string& linear, bool target, bool operands,
               const std::string& suffix = "") {
    if (rank_ == 0) {
      if (target) os_.line("const Off ft", suffix, " = 0;");
      if (operands)
        for (int i = 0; i < n_ops_; ++i)
          if (k_.access[i] != Access::uniform) os_.line("const Off f", i, suffix, " = 0;");
      return;
    }
    os_.line("Idx rem", suffix, " = ", linear, ";");
    for (int d = rank_ - 1; d > 0; --d) {
      if (k_.index64) {
        os_.line("const Idx c", d, suffix, " = rem", suffix, " % (Idx)a.shape[", d, "];");
        os_.line("rem", suffix, " /= (Idx)a.shape[", d, "];");
        continue;
      }
      os_.line("const Idx q", d, suffix, " = divide_index(rem", suffix, ", a.dividers[", d, "]);");
      os_.line("const Idx c", d, suffix, " = rem", suffix, " - q", d, suffix, " * (Idx)a.shape[", d,
               "];");
      os_.line("rem", suffix, " = q", d, suffix, ";");
    }
    os_.line("const Idx c0", suffix, " = rem", suffix, ";");
    auto offset = [&](const std::string& name, const std::string& desc) {
      std::string sum;
      for (int d = 0; d < rank_; ++d)
        sum +=
            cat(d ? " + " : "", "(Off)c", d, suffix, " * (Off)", desc, ".layout.strides[", d, "]");
      os_.line("const Off ", name, suffix, " = ", sum, ";");
    };
    if (target) offset("ft", "t");
    if (operands)
      for (int i = 0; i < n_ops_; ++i)
        if (k_.access[i] != Access::uniform) offset(cat("f", i), cat("o", i));
  }

  // `x` initialiser: the operands' values from per-operand expressions.
  template <class F>
  std::string x_init(F value_of) const {
    if (n_ops_ == 0) return "{0.0f}";
    std::string s = "{";
    for (int i = 0; i < n_ops_; ++i) s += cat(i ? ", " : "", value_of(i));
    return s + "}";
  }

  // ---- elementwise -----------------------------------------------------------------------------
  void elementwise(bool strided) {
    os_.line("// Elementwise: vector steps of kEpt elements while a.vec units last, then one");
    os_.line("// element at a time (the tail, or everything when vector access is not allowed).");
    CodeStream::Scope fn(os_, main_signature());
    prologue();
    os_.line("(void)partials;");
    if (!flex_target()) os_.line("(void)stats;");
    os_.line("const Idx n = (Idx)a.n;");
    os_.line("const Idx units = (Idx)a.vec;");
    os_.line("const Idx step = (Idx)gridDim.x * blockDim.x;");
    os_.line("const Idx first = (Idx)blockIdx.x * blockDim.x + threadIdx.x;");
    {
      CodeStream::Scope loop(os_, "for (Idx u = first; u < units; u += step)");
      os_.line("const Idx i = u * kEpt;");
      if (strided) unravel("i", true, true);
      for (int i = 0; i < n_ops_; ++i) {
        const char* type = device_type(k_.operand_dtypes[i]);
        const std::string at = strided ? cat("p", i, " + f", i) : cat("p", i, " + i");
        switch (k_.access[i]) {
          case Access::unit:
            os_.line(type, " r", i, "[kEpt];");
            os_.line("load_vector(", at, ", r", i, ");");
            break;
          case Access::zero:
            os_.line("const float z", i, " = ", load(i, cat("p", i, "[f", i, "]")), ";");
            break;
          case Access::other:
            os_.line(type, " r", i, "[kEpt];");
            os_.line("const Off sr", i, " = (Off)o", i, ".layout.strides[", rank_ - 1, "];");
            os_.line("#pragma unroll");
            os_.line("for (int e = 0; e < kEpt; ++e) r", i, "[e] = p", i, "[f", i, " + (Off)e * sr",
                     i, "];");
            break;
          case Access::uniform:
            break;
        }
      }
      os_.line("TargetT w[kEpt];");
      const bool unit_target = !strided || k_.target_access == Access::unit;
      if (!unit_target) os_.line("const Off st_inner = (Off)t.layout.strides[", rank_ - 1, "];");
      const std::string offset = !strided      ? "i + (Idx)e"
                                 : unit_target ? "ft + (Off)e"
                                               : "ft + (Off)e * st_inner";
      os_.line("#pragma unroll");
      {
        CodeStream::Scope elems(os_, "for (int e = 0; e < kEpt; ++e)");
        os_.line("const float x[", x_count(), "] = ", x_init([&](int i) {
                   switch (k_.access[i]) {
                     case Access::unit:
                     case Access::other:
                       return load(i, cat("r", i, "[e]"));
                     case Access::zero:
                       return cat("z", i);
                     case Access::uniform:
                       break;
                   }
                   return cat("u", i);
                 }),
                 ";");
        os_.line("w[e] = ", store("expr_body(x, s)", offset), ";");
      }
      if (unit_target) {
        os_.line("store_vector(pt + ", strided ? "ft" : "i", ", w);");
      } else {
        os_.line("#pragma unroll");
        os_.line("for (int e = 0; e < kEpt; ++e) pt[ft + (Off)e * st_inner] = w[e];");
      }
    }
    // Scalar path: four elements per iteration, every load issued before any store.
    {
      CodeStream::Scope loop(os_, "for (Idx i0 = units * kEpt + first; i0 < n; i0 += 4 * step)");
      os_.line("float x[4][", x_count(), "];");
      os_.line("Off at[4];");
      os_.line("#pragma unroll");
      {
        CodeStream::Scope r(os_, "for (int r = 0; r < 4; ++r)");
        os_.line("const Idx i = i0 + (Idx)r * step;");
        os_.line("if (i >= n) continue;");
        if (strided) {
          unravel("i", true, true);
          os_.line("at[r] = ft;");
        } else {
          os_.line("at[r] = (Off)i;");
        }
        for (int i = 0; i < n_ops_; ++i) {
          std::string value;
          if (k_.access[i] == Access::uniform)
            value = cat("u", i);
          else
            value = load(i, strided ? cat("p", i, "[f", i, "]") : cat("p", i, "[i]"));
          os_.line("x[r][", i, "] = ", value, ";");
        }
        if (n_ops_ == 0) os_.line("x[r][0] = 0.0f;");
      }
      os_.line("#pragma unroll");
      os_.line("for (int r = 0; r < 4; ++r)");
      os_.line("  if (i0 + (Idx)r * step < n) pt[at[r]] = ", store("expr_body(x[r], s)", "at[r]"),
               ";");
    }
    if (flex_target()) os_.line("commit_stats(st, stats);");
  }

  // ---- reductions ------------------------------------------------------------------------------

  // The final value of `acc` stored at pt[`at`].
  void store_final(const std::string& acc, const std::string& at) {
    if (arg_to_int())
      os_.line("pt[", at, "] = (int32_t)", acc, ".index;");
    else
      os_.line("pt[", at, "] = ", store(cat("Red::value(", acc, ", a.k)"), at), ";");
  }

  // Value of operand i at position `k` of the reduced dimension (rows kind, scalar access).
  std::string row_scalar_value(int i) const {
    switch (k_.access[i]) {
      case Access::uniform:
        return cat("u", i);
      case Access::zero:
        return cat("z", i);
      case Access::unit:
        return load(i, cat("p", i, "[f", i, " + (Off)k]"));
      case Access::other:
        break;
    }
    if (k_.red_general) return load(i, cat("p", i, "[f", i, "]"));
    return load(i, cat("p", i, "[f", i, " + (Off)k * (Off)o", i, ".red_stride]"));
  }

  // The 2-D arrangement of a 1-D launch (see ExprArgs::grid_x / block_x).
  void thread_grid() {
    os_.line("const int bx = a.block_x;");
    os_.line("const int tx = (int)threadIdx.x % bx;");
    os_.line("const int ty = (int)threadIdx.x / bx;");
    os_.line("const int by = (int)blockDim.x / bx;");
    os_.line("const Idx gx = (Idx)(blockIdx.x % (unsigned)a.grid_x);");
    os_.line("const Idx gy = (Idx)(blockIdx.x / (unsigned)a.grid_x);");
    os_.line("(void)by;");
  }

  // `x` element per operand for the vector loops (`lane` indexes the loaded vector).
  std::string vector_value(int i, const char* lane) const {
    switch (k_.access[i]) {
      case Access::unit:
      case Access::other:
        return load(i, cat("r", i, "[", lane, "]"));
      case Access::zero:
        return cat("z", i);
      case Access::uniform:
        break;
    }
    return cat("u", i);
  }

  void reduce_rows() {
    os_.line("// Reduction along rows: the bx threads of a row share the positions of split gy;");
    os_.line("// by rows per block; one result (or partial) per row.");
    CodeStream::Scope fn(os_, main_signature());
    prologue();
    thread_grid();
    os_.line("const Idx rows = (Idx)a.n;");
    os_.line("const Idx k_len = (Idx)a.k;");
    os_.line("const Idx row = gx * (Idx)by + (Idx)ty;");
    os_.line("const bool active = row < rows;");
    os_.line("Red::Acc acc = Red::identity();");
    os_.line("Off t_at = 0;");
    {
      CodeStream::Scope act(os_, "if (active)");
      if (!k_.red_general) {
        unravel("row", true, true);
        os_.line("t_at = ft;");
        for (int i = 0; i < n_ops_; ++i)
          if (k_.access[i] == Access::zero)
            os_.line("const float z", i, " = ", load(i, cat("p", i, "[f", i, "]")), ";");
      }
      os_.line("const Idx k0 = gy * (Idx)a.seg;");
      os_.line("const Idx k_end = k0 + (Idx)a.seg < k_len ? k0 + (Idx)a.seg : k_len;");
      os_.line("Idx k_scalar = k0;");
      if (!k_.red_general) {
        CodeStream::Scope vec(os_, "if (a.vec)");
        os_.line("k_scalar = k0 + (k_end - k0) / kEpt * kEpt;");
        CodeStream::Scope loop(
            os_, "for (Idx k = k0 + (Idx)tx * kEpt; k < k_scalar; k += (Idx)bx * kEpt)");
        for (int i = 0; i < n_ops_; ++i) {
          const char* type = device_type(k_.operand_dtypes[i]);
          if (k_.access[i] == Access::unit) {
            os_.line(type, " r", i, "[kEpt];");
            os_.line("load_vector(p", i, " + f", i, " + (Off)k, r", i, ");");
          } else if (k_.access[i] == Access::other) {
            os_.line(type, " r", i, "[kEpt];");
            os_.line("#pragma unroll");
            os_.line("for (int e = 0; e < kEpt; ++e) r", i, "[e] = p", i, "[f", i,
                     " + (Off)(k + e) * (Off)o", i, ".red_stride];");
          }
        }
        os_.line("#pragma unroll");
        CodeStream::Scope elems(os_, "for (int e = 0; e < kEpt; ++e)");
        os_.line("const float x[", x_count(),
                 "] = ", x_init([&](int i) { return vector_value(i, "e"); }), ";");
        os_.line("acc = Red::combine(acc, Red::element(expr_body(x, s), (int64_t)(k + e)));");
      }
      CodeStream::Scope loop(os_, "for (Idx k = k_scalar + (Idx)tx; k < k_end; k += (Idx)bx)");
      if (k_.red_general) unravel("k", false, true);
      os_.line("const float x[", x_count(),
               "] = ", x_init([&](int i) { return row_scalar_value(i); }), ";");
      os_.line("acc = Red::combine(acc, Red::element(expr_body(x, s), (int64_t)k));");
    }
    os_.line("acc = reduce_row<Red>(acc, bx);");
    {
      CodeStream::Scope out(os_, "if (tx == 0 && active)");
      os_.line("if (a.splits > 1)");
      os_.line("  static_cast<Red::Acc*>(partials)[(int64_t)row * a.splits + (int64_t)gy] = acc;");
      CodeStream::Scope fin(os_, "else");
      store_final("acc", "t_at");
    }
    if (flex_target())
      os_.line("if (a.splits == 1) commit_stats(st, stats);");
    else
      os_.line("(void)stats;");
  }

  void reduce_columns() {
    os_.line(
        "// Reduction across columns: tx over outputs (kCv adjacent outputs each when a.vec),");
    os_.line("// ty interleaving the reduced positions of split gy; the by partials of an output");
    os_.line("// meet in shared memory and are combined in a fixed order.");
    CodeStream::Scope fn(os_, main_signature());
    os_.line("extern __shared__ __align__(16) unsigned char column_smem_raw[];");
    os_.line("Red::Acc* column_smem = reinterpret_cast<Red::Acc*>(column_smem_raw);");
    prologue();
    thread_grid();
    os_.line("const Idx rows = (Idx)a.n;");
    os_.line("const Idx k_len = (Idx)a.k;");
    os_.line("const int count = a.vec ? kCv : 1;");
    os_.line("const Idx units = a.vec ? rows / kCv : rows;");
    os_.line("const Idx unit = gx * (Idx)bx + (Idx)tx;");
    os_.line("const bool active = unit < units;");
    os_.line("const Idx j0 = unit * (Idx)count;");
    os_.line("Red::Acc acc[kCv];");
    os_.line("#pragma unroll");
    os_.line("for (int c = 0; c < kCv; ++c) acc[c] = Red::identity();");
    os_.line("Off t_at = 0;");
    {
      CodeStream::Scope act(os_, "if (active)");
      unravel("j0", true, true);
      os_.line("t_at = ft;");
      os_.line("const Idx k0 = gy * (Idx)a.seg;");
      os_.line("const Idx k_end = k0 + (Idx)a.seg < k_len ? k0 + (Idx)a.seg : k_len;");
      {
        CodeStream::Scope vec(os_, "if (a.vec)");
        os_.line("#pragma unroll 4");
        CodeStream::Scope loop(os_, "for (Idx k = k0 + (Idx)ty; k < k_end; k += (Idx)by)");
        for (int i = 0; i < n_ops_; ++i) {
          const char* type = device_type(k_.operand_dtypes[i]);
          const std::string at = cat("f", i, " + (Off)k * (Off)o", i, ".red_stride");
          switch (k_.access[i]) {
            case Access::unit:
              os_.line(type, " r", i, "[kCv];");
              os_.line("load_vector(p", i, " + ", at, ", r", i, ");");
              break;
            case Access::zero:
              os_.line("const float z", i, " = ", load(i, cat("p", i, "[", at, "]")), ";");
              break;
            case Access::other:
              os_.line(type, " r", i, "[kCv];");
              os_.line("#pragma unroll");
              os_.line("for (int c = 0; c < kCv; ++c) r", i, "[c] = p", i, "[", at,
                       " + (Off)c * (Off)o", i, ".layout.strides[", rank_ - 1, "]];");
              break;
            case Access::uniform:
              break;
          }
        }
        os_.line("#pragma unroll");
        CodeStream::Scope elems(os_, "for (int c = 0; c < kCv; ++c)");
        os_.line("const float x[", x_count(),
                 "] = ", x_init([&](int i) { return vector_value(i, "c"); }), ";");
        os_.line("acc[c] = Red::combine(acc[c], Red::element(expr_body(x, s), (int64_t)k));");
      }
      CodeStream::Scope scalar(os_, "else");
      CodeStream::Scope loop(os_, "for (Idx k = k0 + (Idx)ty; k < k_end; k += (Idx)by)");
      os_.line("const float x[", x_count(), "] = ", x_init([&](int i) {
                 if (k_.access[i] == Access::uniform) return cat("u", i);
                 return load(i, cat("p", i, "[f", i, " + (Off)k * (Off)o", i, ".red_stride]"));
               }),
               ";");
      os_.line("acc[0] = Red::combine(acc[0], Red::element(expr_body(x, s), (int64_t)k));");
    }
    os_.line("#pragma unroll");
    os_.line("for (int c = 0; c < kCv; ++c) column_smem[(int)threadIdx.x * kCv + c] = acc[c];");
    os_.line("__syncthreads();");
    {
      CodeStream::Scope out(os_, "if (ty == 0 && active)");
      {
        CodeStream::Scope ys(os_, "for (int y = 1; y < by; ++y)");
        os_.line("#pragma unroll");
        os_.line("for (int c = 0; c < kCv; ++c)");
        os_.line("  acc[c] = Red::combine(acc[c], column_smem[(y * bx + tx) * kCv + c]);");
      }
      os_.line("const Off t_inner = ",
               rank_ > 0 ? cat("(Off)t.layout.strides[", rank_ - 1, "]") : std::string("0"), ";");
      // Unrolled to kCv with a guard, so acc stays in registers.
      os_.line("#pragma unroll");
      CodeStream::Scope each(os_, "for (int c = 0; c < kCv; ++c)");
      os_.line("if (c >= count) break;");
      os_.line("if (a.splits > 1)");
      os_.line("  static_cast<Red::Acc*>(partials)[(int64_t)(j0 + c) * a.splits + (int64_t)gy] =",
               " acc[c];");
      CodeStream::Scope fin(os_, "else");
      store_final("acc[c]", "t_at + (Off)c * t_inner");
    }
    if (flex_target())
      os_.line("if (a.splits == 1) commit_stats(st, stats);");
    else
      os_.line("(void)stats;");
  }

  // Second pass of a split reduction: the partials of each output, combined in a fixed order.
  void combine() {
    os_.blank();
    os_.line("// Split reductions: each output's partials, combined in a fixed order.");
    CodeStream::Scope fn(os_, "FLEXKIT_KERNEL void __launch_bounds__(256) ", kCombineKernel,
                         "(ExprOperand t, const void* partials, ExprArgs a, ExprStats* stats)");
    os_.line("TargetT* pt = static_cast<TargetT*>(const_cast<void*>(t.data));");
    if (flex_target())
      os_.line("StatsLocal st = {0, 0ull, 0ull};");
    else
      os_.line("(void)stats;");
    thread_grid();
    os_.line("const Idx rows = (Idx)a.n;");
    os_.line("const Idx row = gx * (Idx)by + (Idx)ty;");
    os_.line("const bool active = row < rows;");
    os_.line("Red::Acc acc = Red::identity();");
    {
      CodeStream::Scope act(os_, "if (active)");
      os_.line("const Red::Acc* p = static_cast<const Red::Acc*>(partials) + (int64_t)row * ",
               "a.splits;");
      os_.line("for (int64_t i = tx; i < a.splits; i += bx) acc = Red::combine(acc, p[i]);");
    }
    os_.line("acc = reduce_row<Red>(acc, bx);");
    {
      CodeStream::Scope out(os_, "if (tx == 0 && active)");
      if (k_.red_general)
        os_.line("const Off ft = 0;");
      else
        unravel("row", true, false);
      store_final("acc", "ft");
    }
    if (flex_target()) os_.line("commit_stats(st, stats);");
  }

  const ExprKernel& k_;
  const ir::Program& body_;
  const int n_ops_;
  const int n_scalars_;
  const int rank_;
  CodeStream os_;
};

}  // namespace

std::string generate_source(const ExprKernel& kernel, const ir::Program& body) {
  return Generator(kernel, body).run();
}

}  // namespace flexkit::codegen
