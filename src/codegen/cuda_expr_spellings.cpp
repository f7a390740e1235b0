// The device-code spellings the CUDA generators share (element types, loads and stores, reduction
// policies, access classes), the program check, and the kernel opening and expression function
// every expression kernel starts with.
#include "codegen/cuda_expr_source.hpp"

#include <cstdint>

#include "codegen/code_stream.hpp"
#include "core/text.hpp"

namespace flexkit::codegen {

using detail::cat;
using ir::Op;

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

}  // namespace flexkit::codegen
