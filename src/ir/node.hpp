// The expression IR: an immutable tree of operations over arrays and scalars. One IR serves
// elementwise/reduction expressions and, later, neuron step bodies.
#pragma once
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "flexkit/array.hpp"

namespace flexkit::ir {

enum class Op : std::uint8_t {
  // leaves
  operand,
  scalar,
  // unary
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
  // binary
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
  // ternary
  where,
  clip,
  // reductions (one argument)
  sum,
  max,
  min,
  mean,
  argmax,
  argmin,
};

inline constexpr int kAllAxes = -1000;  // a reduction over every axis

struct OpInfo {
  std::string_view name;
  int arity;  // 0 for leaves
  bool reduction;
};
const OpInfo& op_info(Op op);

struct Node;
using NodePtr = std::shared_ptr<const Node>;

struct Node {
  Op op = Op::scalar;
  std::vector<NodePtr> args;
  Array array;          // Op::operand: the view read
  double value = 0;     // Op::scalar
  int axis = kAllAxes;  // reductions: normalised axis in [0, rank) or kAllAxes
  Shape shape;          // result shape (reductions keep the reduced axes with size 1)
};

// Builders check shapes (NumPy broadcasting) and axes, throwing ShapeError / IndexError.
NodePtr make_operand(const Array& array);
NodePtr make_scalar(double value);
NodePtr make_op(Op op, std::vector<NodePtr> args);
NodePtr make_reduction(Op op, NodePtr arg, int axis);

}  // namespace flexkit::ir
