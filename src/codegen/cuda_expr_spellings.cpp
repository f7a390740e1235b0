// The expression generators' shared pieces: reduction policies, access classes, the program
// check, and the kernel opening and expression function every expression kernel starts with.
#include "codegen/cuda_expr_source.hpp"

#include <cstdint>

#include "codegen/code_stream.hpp"
#include "core/text.hpp"

namespace flexkit::codegen {

using detail::cat;
using ir::Op;

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
    if (in.op == Op::operand)
      os.line("const float v", i, " = x[", in.slot, "];");
    else if (in.op == Op::scalar)
      os.line("const float v", i, " = s[", scalar_offset + in.slot, "];");
    else
      os.line("const float v", i, " = ",
              device_op_call(in, cat("v", in.a), cat("v", in.b), cat("v", in.c)), ";");
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
    bool ok = info.in_expressions && info.kind != ir::OpKind::reduction;
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
