#include "ir/node.hpp"

#include "core/text.hpp"
#include "flexkit/error.hpp"

namespace flexkit::ir {

using detail::cat;

NodePtr make_operand(const Array& array) {
  if (!array.defined()) throw ValueError("expression: an operand is an empty array handle");
  auto n = std::make_shared<Node>();
  n->op = Op::operand;
  n->array = array;
  n->shape = array.shape();
  return n;
}

NodePtr make_scalar(double value) {
  auto n = std::make_shared<Node>();
  n->op = Op::scalar;
  n->value = value;
  return n;
}

NodePtr make_op(Op op, std::vector<NodePtr> args) {
  const OpInfo& info = op_info(op);
  if (info.kind != OpKind::elementwise || !info.in_expressions ||
      static_cast<int>(args.size()) != info.arity)
    throw ValueError(cat("expression: ", info.name, " takes ", info.arity, " arguments"));
  auto n = std::make_shared<Node>();
  n->op = op;
  Shape shape;
  std::string op_name(info.name);
  for (const NodePtr& a : args) shape = broadcast_shapes(shape, a->shape, op_name.c_str());
  if (shape.size() > static_cast<std::size_t>(kMaxRank))
    throw ShapeError(cat(op_name, ": the broadcast shape ", shape_str(shape), " has rank ",
                         shape.size(), "; at most ", kMaxRank, " is supported"));
  n->shape = std::move(shape);
  n->args = std::move(args);
  return n;
}

NodePtr make_reduction(Op op, NodePtr arg, int axis) {
  const OpInfo& info = op_info(op);
  if (info.kind != OpKind::reduction)
    throw ValueError(cat("expression: ", info.name, " is not a reduction"));
  const int rank = static_cast<int>(arg->shape.size());
  auto n = std::make_shared<Node>();
  n->op = op;
  n->shape = arg->shape;
  if (axis == kAllAxes) {
    if (shape_numel(arg->shape) == 0)
      throw ShapeError(cat(info.name, ": cannot reduce the empty shape ", shape_str(arg->shape),
                           " (the result has no identity for an empty reduction)"));
    for (auto& d : n->shape) d = 1;
  } else {
    if (axis < -rank || axis >= rank)
      throw IndexError(cat(info.name, ": axis ", axis, " is out of range for shape ",
                           shape_str(arg->shape), " (rank ", rank, ")"));
    if (axis < 0) axis += rank;
    if (arg->shape[axis] == 0)
      throw ShapeError(cat(info.name, ": axis ", axis, " of shape ", shape_str(arg->shape),
                           " is empty; a reduction needs at least one element"));
    n->shape[axis] = 1;
  }
  n->axis = axis;
  n->args = {std::move(arg)};
  return n;
}

}  // namespace flexkit::ir
