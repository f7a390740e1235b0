// The structural cache key of an expression kernel: kind, dtypes, access classes and the program,
// never sizes, pointers or scalar values, so one compiled kernel serves every array of the same
// structure.
#include "codegen/cuda_expr_source.hpp"

#include <string>
#include <string_view>

#include "flexkit/dtype.hpp"

namespace flexkit::codegen {

using ir::Op;

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

}  // namespace

std::string expr_kernel_key(const ExprKernel& k, const ir::Program& body) {
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
  if (k.stochastic) key << "|sr";
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

}  // namespace flexkit::codegen
