#include "codegen/cuda_expr_source.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string_view>

#include "codegen/code_stream.hpp"
#include "core/storage.hpp"
#include "core/text.hpp"
#include "flexkit/error.hpp"

namespace flexkit::codegen {

using detail::cat;
using ir::Op;

// ---- spellings shared by the generators --------------------------------------------------------

const char* device_type(DType t) {
  switch (t) {
    case DType::f32:
      return "float";
    case DType::bf16:
      return "uint16_t";
    case DType::flex16:
      return "int16_t";
    case DType::u8:
      return "uint8_t";
    case DType::i32:
      return "int32_t";
    case DType::f64:
      break;
  }
  return "double";
}

std::string device_load(DType dtype, const std::string& raw, const std::string& iwl) {
  switch (dtype) {
    case DType::f32:
      return cat("load_f32(", raw, ")");
    case DType::bf16:
      return cat("load_bf16(", raw, ")");
    case DType::flex16:
      return cat("load_flex16(", raw, ", ", iwl, ")");
    case DType::u8:
      return cat("load_u8(", raw, ")");
    case DType::i32:
      return cat("load_i32(", raw, ")");
    case DType::f64:
      break;
  }
  return cat("load_f64(", raw, ")");
}

std::string device_store(DType dtype, const std::string& value, const std::string& iwl,
                         const std::string& stats) {
  switch (dtype) {
    case DType::f32:
      return value;
    case DType::bf16:
      return cat("store_bf16(", value, ")");
    case DType::flex16:
      return cat("encode_flex16(", value, ", ", iwl, ", ", stats, ")");
    case DType::u8:
      return cat("store_u8(", value, ")");
    case DType::i32:
      return cat("store_i32(", value, ")");
    case DType::f64:
      break;
  }
  return cat("store_f64(", value, ")");
}

const char* reduce_policy(Op op) {
  switch (op) {
    case Op::sum:
      return "ReduceSum";
    case Op::mean:
      return "ReduceMean";
    case Op::max:
      return "ReduceMax";
    case Op::min:
      return "ReduceMin";
    case Op::argmax:
      return "ReduceArg<true>";
    case Op::argmin:
      return "ReduceArg<false>";
    default:
      return "";
  }
}

void emit_program_function(CodeStream& os, const std::string& name, const ir::Program& program,
                           int scalar_offset, int scalar_count) {
  const std::size_t n_ops = program.operands.size();
  CodeStream::Scope fn(os, "__device__ __forceinline__ float ", name, "(const float (&x)[",
                       n_ops > 0 ? n_ops : 1, "], const float (&s)[", scalar_count, "])");
  for (std::size_t i = 0; i < program.code.size(); ++i) {
    const ir::Instr& in = program.code[i];
    const std::string op = cat("ew_", op_info(in.op).name);
    switch (op_info(in.op).arity) {
      case 0:
        if (in.op == Op::operand)
          os.line("const float v", i, " = x[", in.slot, "];");
        else
          os.line("const float v", i, " = s[", scalar_offset + in.slot, "];");
        break;
      case 1:
        os.line("const float v", i, " = ", op, "(v", in.a, ");");
        break;
      case 2:
        os.line("const float v", i, " = ", op, "(v", in.a, ", v", in.b, ");");
        break;
      default:
        os.line("const float v", i, " = ", op, "(v", in.a, ", v", in.b, ", v", in.c, ");");
        break;
    }
  }
  os.line("return v", program.code.size() - 1, ";");
}

void emit_kernel_preamble(CodeStream& os, const std::string& title, const std::string& key,
                          bool index64) {
  os.line("// flexkit ", title, ", generated at run time.");
  os.line("// structure: ", key);
  os.line("#include \"flexkit/expr_kernels.cuh\"");
  os.blank();
  os.line("using namespace flexkit::rtc;");
  os.blank();
  // NVRTC has no offsetof; the sizes catch a field added, removed or resized on one side.
  os.line("static_assert(sizeof(ExprOperand) == ", sizeof(ExprOperand),
          " && sizeof(ExprArgs) == ", sizeof(ExprArgs),
          " && sizeof(ExprStats) == ", sizeof(ExprStats),
          " && sizeof(ExprArgPartial) == ", sizeof(ExprArgPartial),
          ", \"kernel parameter structs differ from the host's\");");
  os.blank();
  os.line("typedef ", index64 ? "uint64_t" : "uint32_t", " Idx;");
  os.line("typedef ", index64 ? "int64_t" : "int32_t", " Off;");
}

const char* access_code(Access a) {
  switch (a) {
    case Access::unit:
      return "u";
    case Access::zero:
      return "z";
    case Access::other:
      return "o";
    case Access::uniform:
      return "s";
  }
  return "?";
}

std::string program_error(const ir::Program& program) {
  if (program.code.empty()) return "the program has no instructions";
  const auto n = static_cast<std::int32_t>(program.code.size());
  for (std::int32_t i = 0; i < n; ++i) {
    const ir::Instr& in = program.code[static_cast<std::size_t>(i)];
    const ir::OpInfo& info = op_info(in.op);
    bool ok = !info.reduction;
    if (in.op == Op::operand)
      ok = ok && in.slot >= 0 && static_cast<std::size_t>(in.slot) < program.operands.size();
    else if (in.op == Op::scalar)
      ok = ok && in.slot >= 0 && static_cast<std::size_t>(in.slot) < program.scalars.size();
    const std::int32_t args[3] = {in.a, in.b, in.c};
    for (int j = 0; j < info.arity; ++j) ok = ok && args[j] >= 0 && args[j] < i;
    if (!ok)
      return cat("instruction ", i, " (", info.name, ") is not a valid program step\n",
                 ir::to_string(program));
  }
  return {};
}

namespace {

const char* kind_name(KernelKind k) {
  switch (k) {
    case KernelKind::ew_contiguous:
      return "ewc";
    case KernelKind::ew_strided:
      return "ews";
    case KernelKind::reduce_rows:
      return "rrow";
    case KernelKind::reduce_columns:
      return "rcol";
  }
  return "?";
}

bool is_arg(Op op) {
  return op == Op::argmax || op == Op::argmin;
}

// ---- layout facts -------------------------------------------------------------------------------

constexpr std::int64_t kIndex32Limit = std::int64_t{1} << 31;

// Largest |offset| a layout reaches from element 0.
std::int64_t offset_extent(const StridedLayout& l) {
  std::int64_t e = 0;
  for (int d = 0; d < l.rank; ++d) e += (l.shape[d] - 1) * std::llabs(l.strides[d]);
  return e;
}

bool all_zero_strides(const StridedLayout& l) {
  for (int d = 0; d < l.rank; ++d)
    if (l.strides[d] != 0) return false;
  return true;
}

Access access_of_stride(std::int64_t stride) {
  return stride == 1 ? Access::unit : (stride == 0 ? Access::zero : Access::other);
}

// Whether vector access of `elements` elements works at `data` plus any multiple of the first
// `dims` strides (and of `extra_stride`).
bool vector_aligned(const void* data, DType dtype, int elements, const StridedLayout& l, int dims,
                    std::int64_t extra_stride = 0) {
  const auto size = static_cast<std::int64_t>(itemsize(dtype));
  const std::int64_t align = std::min<std::int64_t>(16, elements * size);
  if (reinterpret_cast<std::uintptr_t>(data) % static_cast<std::uintptr_t>(align) != 0)
    return false;
  for (int d = 0; d < dims; ++d)
    if ((l.strides[d] * size) % align != 0) return false;
  return (extra_stride * size) % align == 0;
}

ExprOperand operand_of(const Array& a, const StridedLayout& layout) {
  ExprOperand op{};
  op.data = a.data();
  op.iwl = a.dtype() == DType::flex16 ? a.iwl() : 0;
  op.layout = layout;
  return op;
}

// The layout without axis `axis`.
StridedLayout drop_axis(const StridedLayout& l, int axis) {
  StridedLayout out{};
  for (int d = 0; d < l.rank; ++d) {
    if (d == axis) continue;
    out.shape[out.rank] = l.shape[d];
    out.strides[out.rank] = l.strides[d];
    ++out.rank;
  }
  return out;
}

StridedLayout contiguous_layout(const Shape& shape) {
  StridedLayout l{};
  l.rank = static_cast<std::int32_t>(shape.size());
  std::int64_t stride = 1;
  for (int d = l.rank - 1; d >= 0; --d) {
    l.shape[d] = shape[d];
    l.strides[d] = stride;
    stride *= shape[d];
  }
  return l;
}

void set_space(ExprArgs& args, const StridedLayout& l) {
  args.rank = l.rank;
  for (int d = 0; d < l.rank; ++d) args.shape[d] = l.shape[d];
}

std::string stage_name(const ir::Stage& stage) {
  return cat("expression stage writing ", stage.target.describe());
}

void describe_elementwise(const ir::Stage& stage, ExprKernel& k) {
  const ir::Program& body = stage.body;
  if (stage.target.shape() != body.shape)
    throw ShapeError(cat(stage_name(stage), ": the target shape differs from the iteration shape ",
                         shape_str(body.shape)));
  const std::size_t n_ops = body.operands.size();
  std::vector<StridedLayout> layouts;
  layouts.push_back(ArrayAccess::layout(stage.target));
  for (const Array& a : body.operands) layouts.push_back(ArrayAccess::layout(a));
  portable::coalesce_layouts(layouts.data(), static_cast<int>(layouts.size()));
  const StridedLayout& tl = layouts[0];
  const int rank = tl.rank;
  const std::int64_t n = shape_numel(body.shape);

  k.target = operand_of(stage.target, tl);
  for (std::size_t i = 0; i < n_ops; ++i)
    k.operands.push_back(operand_of(body.operands[i], layouts[i + 1]));

  bool fits32 = n < kIndex32Limit;
  for (const StridedLayout& l : layouts) fits32 = fits32 && offset_extent(l) < kIndex32Limit;
  k.index64 = !fits32;

  bool contiguous = rank == 0 || tl.strides[0] == 1;
  for (std::size_t i = 0; contiguous && i < n_ops; ++i)
    contiguous = layouts[i + 1].rank == 0 || layouts[i + 1].strides[0] == 0 ||
                 layouts[i + 1].strides[0] == 1;
  contiguous = contiguous && rank <= 1;
  const int ept = k.elements_per_thread;
  k.kind = contiguous ? KernelKind::ew_contiguous : KernelKind::ew_strided;
  k.target_access = rank == 0 || tl.strides[rank - 1] == 1 ? Access::unit : Access::other;
  k.vector_extent = rank == 0 ? 1 : tl.shape[rank - 1];
  const int outer = std::max(0, rank - 1);
  bool ok = k.vector_extent % ept == 0 || contiguous;
  if (k.target_access == Access::unit)
    ok = ok && vector_aligned(k.target.data, k.target_dtype, ept, tl, outer);
  for (std::size_t i = 0; i < n_ops; ++i) {
    const StridedLayout& l = layouts[i + 1];
    Access a = all_zero_strides(l) ? Access::uniform : access_of_stride(l.strides[rank - 1]);
    k.access.push_back(a);
    if (a == Access::unit)
      ok = ok && vector_aligned(k.operands[i].data, k.operand_dtypes[i], ept, l, outer);
  }
  k.vector_ok = ok;
  k.args.n = n;
  k.args.vec = ok ? n / ept : 0;
  set_space(k.args, tl);
}

void describe_reduction(const ir::Stage& stage, ExprKernel& k) {
  const ir::Program& body = stage.body;
  const Shape& shape = body.shape;
  const Op op = *stage.reduce;
  if (!op_info(op).reduction)
    throw ValueError(cat(stage_name(stage), ": ", op_info(op).name, " is not a reduction"));
  const int r = static_cast<int>(shape.size());
  const bool all = stage.axis == ir::kAllAxes;
  if (!all && (stage.axis < 0 || stage.axis >= r))
    throw IndexError(cat(stage_name(stage), ": reduction axis ", stage.axis,
                         " is out of range for the iteration shape ", shape_str(shape)));
  Shape expected = shape;
  for (int d = 0; d < r; ++d)
    if (all || d == stage.axis) expected[d] = 1;
  if (stage.target.shape() != expected)
    throw ShapeError(cat(stage_name(stage), ": a reduction of ", shape_str(shape),
                         " must write the shape ", shape_str(expected)));
  if (shape_numel(shape) == 0)
    throw ShapeError(cat(stage_name(stage), ": cannot reduce the empty shape ", shape_str(shape)));
  k.reduce = op;
  k.reduce_all = all;
  const std::size_t n_ops = body.operands.size();
  const std::int64_t total = shape_numel(shape);
  bool fits32 = total < kIndex32Limit;

  if (all) {
    // A contiguous layout of the shape first: it never blocks a merge and carries the shape
    // when there are no operands. Coalescing keeps row-major order, so position k of the
    // coalesced space is the flat index argmax reports.
    std::vector<StridedLayout> layouts{contiguous_layout(shape)};
    for (const Array& a : body.operands) layouts.push_back(ArrayAccess::layout(a));
    portable::coalesce_layouts(layouts.data(), static_cast<int>(layouts.size()));
    const int rr = layouts[0].rank;
    k.kind = KernelKind::reduce_rows;
    k.red_general = rr > 1;
    k.target = operand_of(stage.target, StridedLayout{});
    k.args.n = 1;
    k.args.k = total;
    for (std::size_t i = 0; i < n_ops; ++i) {
      const StridedLayout& l = layouts[i + 1];
      fits32 = fits32 && offset_extent(l) < kIndex32Limit;
      if (k.red_general) {
        k.operands.push_back(operand_of(body.operands[i], l));
        k.access.push_back(all_zero_strides(l) ? Access::uniform : Access::other);
      } else {
        ExprOperand o = operand_of(body.operands[i], StridedLayout{});
        o.red_stride = rr == 1 ? l.strides[0] : 0;
        k.operands.push_back(o);
        k.access.push_back(o.red_stride == 0 ? Access::uniform : access_of_stride(o.red_stride));
      }
    }
    if (k.red_general) set_space(k.args, layouts[0]);
    bool ok = !k.red_general;
    for (std::size_t i = 0; ok && i < n_ops; ++i)
      if (k.access[i] == Access::unit)
        ok = vector_aligned(k.operands[i].data, k.operand_dtypes[i], k.elements_per_thread,
                            StridedLayout{}, 0);
    k.vector_ok = ok;
    k.vector_extent = total;
    k.index64 = !fits32;
    return;
  }

  // One axis: outputs span the other axes (coalesced together with the target's layout);
  // each operand walks the reduced axis with its own stride.
  const int axis = stage.axis;
  std::vector<StridedLayout> layouts{drop_axis(ArrayAccess::layout(stage.target), axis)};
  std::vector<std::int64_t> red_strides;
  for (const Array& a : body.operands) {
    StridedLayout l = ArrayAccess::layout(a);
    red_strides.push_back(l.strides[axis]);
    layouts.push_back(drop_axis(l, axis));
  }
  portable::coalesce_layouts(layouts.data(), static_cast<int>(layouts.size()));
  const StridedLayout& out = layouts[0];
  const int ro = out.rank;
  const std::int64_t rows = total / shape[axis];
  k.target = operand_of(stage.target, out);
  k.args.n = rows;
  k.args.k = shape[axis];
  set_space(k.args, out);
  fits32 = fits32 && offset_extent(out) < kIndex32Limit;

  bool any_red_other = false;
  std::vector<Access> red_access, out_access;
  for (std::size_t i = 0; i < n_ops; ++i) {
    const StridedLayout& l = layouts[i + 1];
    ExprOperand o = operand_of(body.operands[i], l);
    o.red_stride = red_strides[i];
    k.operands.push_back(o);
    fits32 =
        fits32 && offset_extent(l) + (shape[axis] - 1) * std::llabs(o.red_stride) < kIndex32Limit;
    const bool uniform = all_zero_strides(l) && o.red_stride == 0;
    red_access.push_back(uniform ? Access::uniform : access_of_stride(o.red_stride));
    out_access.push_back(uniform   ? Access::uniform
                         : ro == 0 ? Access::zero
                                   : access_of_stride(l.strides[ro - 1]));
    any_red_other = any_red_other || red_access.back() == Access::other;
  }
  k.index64 = !fits32;
  // Threads go where memory is contiguous: along the reduced axis when it is dense for the
  // operands (or there is a single output), else across outputs.
  const bool rows_kind = rows == 1 || ro == 0 || !any_red_other;
  if (rows_kind) {
    k.kind = KernelKind::reduce_rows;
    k.access = red_access;
    bool ok = true;
    for (std::size_t i = 0; ok && i < n_ops; ++i)
      if (k.access[i] == Access::unit)
        ok = vector_aligned(k.operands[i].data, k.operand_dtypes[i], k.elements_per_thread,
                            layouts[i + 1], ro);
    k.vector_ok = ok;
    k.vector_extent = shape[axis];
  } else {
    k.kind = KernelKind::reduce_columns;
    k.access = out_access;
    bool ok = out.shape[ro - 1] % kColumnVector == 0;
    for (std::size_t i = 0; ok && i < n_ops; ++i)
      if (k.access[i] == Access::unit)
        ok = vector_aligned(k.operands[i].data, k.operand_dtypes[i], kColumnVector, layouts[i + 1],
                            ro - 1, red_strides[i]);
    k.vector_ok = ok;
    k.vector_extent = rows;
  }
}

// Appends pieces to a key without a stream: the key is built on every assignment, so it
// should cost well under a microsecond.
struct KeyBuilder {
  std::string text;
  KeyBuilder& operator<<(std::string_view v) {
    text += v;
    return *this;
  }
  KeyBuilder& operator<<(char c) {
    text += c;
    return *this;
  }
  KeyBuilder& operator<<(long long v) {
    text += std::to_string(v);
    return *this;
  }
};

std::string make_key(const ExprKernel& k, const ir::Program& body) {
  KeyBuilder key;
  key.text.reserve(64 + 24 * body.code.size());
  key << "fx1|" << kind_name(k.kind);
  if (k.reduce) {
    key << '|' << op_info(*k.reduce).name;
    if (k.reduce_all) key << (k.red_general ? "|allg" : "|all");
  }
  key << "|r" << static_cast<long long>(k.args.rank) << (k.index64 ? "|i64" : "|i32") << "|e"
      << static_cast<long long>(k.elements_per_thread);
  if (k.descriptors_in_memory) key << "|dm";
  key << "|t" << dtype_name(k.target_dtype) << ':' << access_code(k.target_access) << "|o";
  for (std::size_t i = 0; i < k.access.size(); ++i)
    key << dtype_name(k.operand_dtypes[i]) << ':' << access_code(k.access[i]) << ',';
  key << "|s" << static_cast<long long>(body.scalars.size()) << "|c";
  for (const ir::Instr& in : body.code) {
    key << op_info(in.op).name;
    if (in.op == Op::operand || in.op == Op::scalar)
      key << '#' << static_cast<long long>(in.slot);
    else
      key << '(' << static_cast<long long>(in.a) << ',' << static_cast<long long>(in.b) << ','
          << static_cast<long long>(in.c) << ')';
    key << ';';
  }
  return std::move(key.text);
}

// ---- source generation ------------------------------------------------------------------------

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
  std::string store(const std::string& v) const {
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
      os_.line("const Idx c", d, suffix, " = rem", suffix, " % (Idx)a.shape[", d, "];");
      os_.line("rem", suffix, " /= (Idx)a.shape[", d, "];");
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
        os_.line("w[e] = ", store("expr_body(x, s)"), ";");
      }
      if (!strided || k_.target_access == Access::unit) {
        os_.line("store_vector(pt + ", strided ? "ft" : "i", ", w);");
      } else {
        os_.line("const Off st_inner = (Off)t.layout.strides[", rank_ - 1, "];");
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
      os_.line("  if (i0 + (Idx)r * step < n) pt[at[r]] = ", store("expr_body(x[r], s)"), ";");
    }
    if (flex_target()) os_.line("commit_stats(st, stats);");
  }

  // ---- reductions ------------------------------------------------------------------------------

  // The final value of `acc` stored at pt[`at`].
  void store_final(const std::string& acc, const std::string& at) {
    if (arg_to_int())
      os_.line("pt[", at, "] = (int32_t)", acc, ".index;");
    else
      os_.line("pt[", at, "] = ", store(cat("Red::value(", acc, ", a.k)")), ";");
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

// About 16-32 registers of raw operand data per thread whatever the operand count, so the
// 64-register bound is met without spilling; even four 4-byte elements of five operands keep
// 80 bytes per thread in flight, several times what HBM latency needs at 1024 threads per SM.
int elements_per_thread(std::size_t operand_count) {
  return operand_count <= 1 ? 16 : (operand_count <= 3 ? 8 : (operand_count <= 8 ? 4 : 2));
}

std::size_t partial_bytes(Op reduce) {
  switch (reduce) {
    case Op::sum:
    case Op::mean:
      return sizeof(double);
    case Op::argmax:
    case Op::argmin:
      return sizeof(ExprArgPartial);
    default:
      return sizeof(float);
  }
}

ExprKernel describe_stage(const ir::Stage& stage) {
  if (!stage.target.defined())
    throw ValueError("expression stage: the target is an empty array handle");
  ExprKernel k;
  const ir::Program& body = stage.body;
  if (std::string error = program_error(body); !error.empty())
    throw ValueError(cat(stage_name(stage), ": ", error));
  auto check_dtype = [&](const Array& a, const char* role) {
    if (a.dtype() == DType::f64)
      throw DTypeError(cat(stage_name(stage), ": the ", role, " ", a.describe(),
                           " is f64, which only the CPU backend supports; use f32 on CUDA"));
  };
  check_dtype(stage.target, "target");
  k.target_dtype = stage.target.dtype();
  for (const Array& a : body.operands) {
    check_dtype(a, "operand");
    if (a.shape() != body.shape)
      throw ShapeError(cat(stage_name(stage), ": operand ", a.describe(),
                           " is not broadcast to the iteration shape ", shape_str(body.shape)));
    k.operand_dtypes.push_back(a.dtype());
  }
  for (double v : body.scalars) k.scalars.push_back(static_cast<float>(v));
  k.elements_per_thread = elements_per_thread(body.operands.size());
  if (stage.reduce)
    describe_reduction(stage, k);
  else
    describe_elementwise(stage, k);
  const std::size_t parameter_bytes = sizeof(ExprOperand) * (body.operands.size() + 1) +
                                      sizeof(float) * body.scalars.size() + sizeof(ExprArgs) +
                                      2 * sizeof(void*);
  k.descriptors_in_memory = parameter_bytes > kMaxParameterBytes;
  k.key = make_key(k, body);
  return k;
}

std::string generate_source(const ExprKernel& kernel, const ir::Program& body) {
  return Generator(kernel, body).run();
}

namespace {

constexpr std::int64_t kBlockThreads = 256;
// Threads per SM that are resident at once whatever the expression: the kernels' launch bounds
// cap registers at 64 per thread. Grids are sized in waves of this many, so a grid either fits
// one wave (every block runs from the start) or spans several (the last one matters little).
constexpr std::int64_t kResidentThreadsPerSm = 1024;
// Elements a row-reduction thread should cover: enough vector steps to amortise the tree.
constexpr std::int64_t kRowElementsPerThread = 64;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

std::int64_t pow2_at_least(std::int64_t v) {
  std::int64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

// Block shape for combining `width` values per output: a power-of-two number of threads per
// output (at most 256), several outputs per block when narrower than a warp.
LaunchShape row_block(std::int64_t width, std::int64_t outputs, std::int64_t max_threads) {
  LaunchShape s;
  const std::int64_t x = std::clamp<std::int64_t>(pow2_at_least(width), 1, max_threads);
  const std::int64_t y = x <= 32 ? kBlockThreads / x : 1;
  s.block_x = static_cast<unsigned>(x);
  s.block_y = static_cast<unsigned>(y);
  s.grid_x = static_cast<unsigned>(ceil_div(outputs, y));
  return s;
}

// Splits of the reduced length that bring the grid to about one full wave.
// Splits of the reduced length for a grid of `blocks` blocks per split, given how many blocks
// one wave holds: one wave when that fills at least 3/4 of it, else at least four waves.
std::int64_t choose_splits(std::int64_t blocks, std::int64_t wave, std::int64_t max_splits) {
  max_splits = std::clamp<std::int64_t>(max_splits, 1, 65535);
  if (blocks >= 4 * wave) return 1;
  const std::int64_t single = wave / blocks;
  if (single >= 1 && 4 * blocks * single >= 3 * wave) return std::min(single, max_splits);
  return std::min(ceil_div(4 * wave, blocks), max_splits);
}

std::int64_t wave_of(int sms, std::int64_t threads_per_block) {
  return sms * std::max<std::int64_t>(1, kResidentThreadsPerSm / threads_per_block);
}

}  // namespace

ExprLaunch plan_launch(const ExprKernel& k, int multiprocessors) {
  const int sms = std::max(1, multiprocessors);
  ExprLaunch launch;
  launch.args = k.args;
  ExprArgs& a = launch.args;
  switch (k.kind) {
    case KernelKind::ew_contiguous:
    case KernelKind::ew_strided: {
      const std::int64_t work = a.vec > 0 ? a.vec : ceil_div(a.n, 4);
      launch.main.block_x = kBlockThreads;
      launch.main.grid_x = static_cast<unsigned>(
          std::clamp<std::int64_t>(ceil_div(work, kBlockThreads), 1, wave_of(sms, kBlockThreads)));
      a.splits = 1;
      a.grid_x = launch.main.grid_x;
      a.block_x = static_cast<std::int32_t>(launch.main.block_x);
      return launch;
    }
    case KernelKind::reduce_rows: {
      const std::int64_t ept = k.elements_per_thread;
      launch.main = row_block(ceil_div(a.k, kRowElementsPerThread), a.n, 512);
      const std::int64_t per_block = launch.main.block_x * launch.main.block_y;
      std::int64_t splits = choose_splits(launch.main.grid_x, wave_of(sms, per_block),
                                          a.k / (launch.main.block_x * ept * 4));
      a.seg = ceil_div(ceil_div(a.k, splits), ept) * ept;
      a.splits = ceil_div(a.k, a.seg);
      a.vec = k.vector_ok ? 1 : 0;
      launch.main.grid_y = static_cast<unsigned>(a.splits);
      break;
    }
    case KernelKind::reduce_columns: {
      a.vec = k.vector_ok ? 1 : 0;
      const std::int64_t units = a.vec ? a.n / kColumnVector : a.n;
      const std::int64_t bx = std::clamp<std::int64_t>(pow2_at_least(units), 1, 32);
      const std::int64_t by = kBlockThreads / bx;
      launch.main.block_x = static_cast<unsigned>(bx);
      launch.main.block_y = static_cast<unsigned>(by);
      launch.main.grid_x = static_cast<unsigned>(ceil_div(units, bx));
      const std::int64_t splits =
          choose_splits(launch.main.grid_x, wave_of(sms, kBlockThreads), a.k / (by * 8));
      a.seg = ceil_div(a.k, splits);
      a.splits = ceil_div(a.k, a.seg);
      launch.main.grid_y = static_cast<unsigned>(a.splits);
      launch.main.shared_bytes =
          static_cast<unsigned>(kBlockThreads * kColumnVector * partial_bytes(*k.reduce));
      break;
    }
  }
  a.grid_x = launch.main.grid_x;
  a.block_x = static_cast<std::int32_t>(launch.main.block_x);
  launch.combine_args = a;
  if (a.splits > 1) {
    launch.combine = row_block(a.splits, a.n, kBlockThreads);
    launch.combine_args.grid_x = launch.combine.grid_x;
    launch.combine_args.block_x = static_cast<std::int32_t>(launch.combine.block_x);
    launch.partials = a.n * a.splits;
  }
  return launch;
}

}  // namespace flexkit::codegen
