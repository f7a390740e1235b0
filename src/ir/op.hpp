// The one op list of flexkit's IR, shared by fused expressions (ir::Program, built from Expr
// trees) and neuron step bodies (snn::StepProgram, lowered from FlexSN), and the SSA instruction
// both are made of. Each op's name, arity and where it may appear are in one table (op.cpp); its
// math is in one place for the CPU (ir/op_eval.hpp) and one spelling for generated CUDA
// (codegen/cuda_op_spelling.hpp), both calling the portable op math (flexkit/portable/ew_ops.hpp,
// neuron_ops.hpp) that device code includes too, so the backends agree.
#pragma once
#include <cstdint>
#include <string_view>

#include "ir/surrogate.hpp"

namespace flexkit::ir {

enum class Op : std::uint8_t {
  // leaves of expressions
  operand,  // Instr::slot indexes Program::operands
  scalar,   // Instr::slot indexes Program::scalars (launch parameters, not part of a cache key)
  // leaves of step programs
  constant,  // Instr::constant, part of the kernel
  seq_in,    // Instr::slot indexes StepKernel::seq_in
  carried,   // Instr::slot indexes StepKernel::carried
  param,     // Instr::slot indexes StepKernel::params
  // unary (a)
  neg,
  abs,
  sqr,
  sqrt,
  exp,
  exp2,
  log,
  log2,
  sig,
  sig2,
  tanh,
  tanh2,
  reciprocal,
  floor,
  ceil,
  sign,
  spike,       // step programs: Heaviside, 1 if a >= 0 else 0 (NaN gives 0)
  spike_grad,  // step programs: the surrogate's derivative at a (Instr::surrogate, Instr::alpha)
  detach,      // step programs: identity that stops gradients; never reaches a backend (kernels
               // are built after differentiation, with every detach replaced by its operand)
  // binary (a, b)
  add,
  sub,
  mul,
  div,
  pow,
  eq,
  ne,
  lt,
  le,
  gt,
  ge,
  maximum,
  minimum,
  // ternary (a, b, c)
  where,  // a != 0 ? b : c
  clip,   // min(max(a, b), c)
  // reductions of expressions (one argument, along an axis)
  sum,
  max,
  min,
  mean,
  argmax,
  argmin,
};

inline constexpr int kAllAxes = -1000;  // a reduction over every axis

enum class OpKind : std::uint8_t { leaf, elementwise, reduction };

struct OpInfo {
  std::string_view name;  // listings, cache keys, messages; elementwise ops: the math is ew_<name>
  int arity;              // 0 for leaves
  OpKind kind;
  bool in_expressions;  // may appear in an ir::Program (reductions only as a Stage's reduce)
  bool in_steps;        // may appear in a step program
};
const OpInfo& op_info(Op op);

inline bool is_elementwise(Op op) {
  return op_info(op).kind == OpKind::elementwise;
}

// One SSA instruction: its value is its index in the program, and its arguments always refer to
// earlier instructions.
struct Instr {
  Op op = Op::constant;
  std::int32_t a = -1, b = -1, c = -1;        // argument value numbers
  std::int32_t slot = -1;                     // leaves other than constant
  float constant = 0;                         // Op::constant
  Surrogate surrogate = Surrogate::kSigmoid;  // Op::spike_grad
  float alpha = 0;                            // Op::spike_grad
};

}  // namespace flexkit::ir
