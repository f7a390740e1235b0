// The tree form of an expression: an immutable tree of operations (ir/op.hpp) over arrays and
// scalars, which make_plan (ir/plan.hpp) lowers to the flat programs the backends run.
#pragma once
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "flexkit/array.hpp"
#include "ir/op.hpp"

namespace flexkit::ir {

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
