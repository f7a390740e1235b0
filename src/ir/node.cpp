#include "ir/node.hpp"

#include <array>

#include "core/text.hpp"
#include "flexkit/error.hpp"

namespace flexkit::ir {

using detail::cat;

const OpInfo& op_info(Op op) {
  static const std::array<OpInfo, 41> kTable = {{
      {"operand", 0, false}, {"scalar", 0, false},  {"neg", 1, false},        {"abs", 1, false},
      {"sqr", 1, false},     {"sqrt", 1, false},    {"exp", 1, false},        {"exp2", 1, false},
      {"log", 1, false},     {"log2", 1, false},    {"sig", 1, false},        {"sig2", 1, false},
      {"tanh", 1, false},    {"tanh2", 1, false},   {"reciprocal", 1, false}, {"floor", 1, false},
      {"ceil", 1, false},    {"sign", 1, false},    {"add", 2, false},        {"sub", 2, false},
      {"mul", 2, false},     {"div", 2, false},     {"pow", 2, false},        {"eq", 2, false},
      {"ne", 2, false},      {"lt", 2, false},      {"le", 2, false},         {"gt", 2, false},
      {"ge", 2, false},      {"maximum", 2, false}, {"minimum", 2, false},    {"where", 3, false},
      {"clip", 3, false},    {"sum", 1, true},      {"max", 1, true},         {"min", 1, true},
      {"mean", 1, true},     {"argmax", 1, true},   {"argmin", 1, true},
  }};
  return kTable[static_cast<std::size_t>(op)];
}

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
  if (info.reduction || info.arity == 0 || static_cast<int>(args.size()) != info.arity)
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
  if (!info.reduction) throw ValueError(cat("expression: ", info.name, " is not a reduction"));
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
