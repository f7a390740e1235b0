// The C++ front end of the expression IR: operators and functions that build trees.
#include "flexkit/expr.hpp"

#include "ir/node.hpp"

namespace flexkit {

using ir::make_op;
using ir::make_reduction;
using ir::Op;

Expr::Expr(const Array& array) : node_(ir::make_operand(array)) {}
Expr::Expr(double value) : node_(ir::make_scalar(value)) {}
const Shape& Expr::shape() const {
  return node_->shape;
}

namespace {
Expr unary(Op op, const Expr& a) {
  return Expr(make_op(op, {a.node()}));
}
Expr binary(Op op, const Expr& a, const Expr& b) {
  return Expr(make_op(op, {a.node(), b.node()}));
}
Expr reduce(Op op, const Expr& a, int axis) {
  return Expr(make_reduction(op, a.node(), axis));
}
}  // namespace

Expr operator+(const Expr& a, const Expr& b) {
  return binary(Op::add, a, b);
}
Expr operator-(const Expr& a, const Expr& b) {
  return binary(Op::sub, a, b);
}
Expr operator*(const Expr& a, const Expr& b) {
  return binary(Op::mul, a, b);
}
Expr operator/(const Expr& a, const Expr& b) {
  return binary(Op::div, a, b);
}
Expr operator-(const Expr& a) {
  return unary(Op::neg, a);
}
Expr pow(const Expr& a, const Expr& b) {
  return binary(Op::pow, a, b);
}
Expr eq(const Expr& a, const Expr& b) {
  return binary(Op::eq, a, b);
}
Expr ne(const Expr& a, const Expr& b) {
  return binary(Op::ne, a, b);
}
Expr lt(const Expr& a, const Expr& b) {
  return binary(Op::lt, a, b);
}
Expr le(const Expr& a, const Expr& b) {
  return binary(Op::le, a, b);
}
Expr gt(const Expr& a, const Expr& b) {
  return binary(Op::gt, a, b);
}
Expr ge(const Expr& a, const Expr& b) {
  return binary(Op::ge, a, b);
}
Expr operator<(const Expr& a, const Expr& b) {
  return lt(a, b);
}
Expr operator<=(const Expr& a, const Expr& b) {
  return le(a, b);
}
Expr operator>(const Expr& a, const Expr& b) {
  return gt(a, b);
}
Expr operator>=(const Expr& a, const Expr& b) {
  return ge(a, b);
}
Expr abs(const Expr& a) {
  return unary(Op::abs, a);
}
Expr neg(const Expr& a) {
  return unary(Op::neg, a);
}
Expr sqr(const Expr& a) {
  return unary(Op::sqr, a);
}
Expr sqrt(const Expr& a) {
  return unary(Op::sqrt, a);
}
Expr exp(const Expr& a) {
  return unary(Op::exp, a);
}
Expr exp2(const Expr& a) {
  return unary(Op::exp2, a);
}
Expr log(const Expr& a) {
  return unary(Op::log, a);
}
Expr log2(const Expr& a) {
  return unary(Op::log2, a);
}
Expr sig(const Expr& a) {
  return unary(Op::sig, a);
}
Expr sig2(const Expr& a) {
  return unary(Op::sig2, a);
}
Expr tanh(const Expr& a) {
  return unary(Op::tanh, a);
}
Expr tanh2(const Expr& a) {
  return unary(Op::tanh2, a);
}
Expr maximum(const Expr& a, const Expr& b) {
  return binary(Op::maximum, a, b);
}
Expr minimum(const Expr& a, const Expr& b) {
  return binary(Op::minimum, a, b);
}
Expr clip(const Expr& a, const Expr& lo, const Expr& hi) {
  return Expr(make_op(Op::clip, {a.node(), lo.node(), hi.node()}));
}
Expr reciprocal(const Expr& a) {
  return unary(Op::reciprocal, a);
}
Expr where(const Expr& c, const Expr& a, const Expr& b) {
  return Expr(make_op(Op::where, {c.node(), a.node(), b.node()}));
}
Expr floor(const Expr& a) {
  return unary(Op::floor, a);
}
Expr ceil(const Expr& a) {
  return unary(Op::ceil, a);
}
Expr sign(const Expr& a) {
  return unary(Op::sign, a);
}

Expr sum(const Expr& a, int axis) {
  return reduce(Op::sum, a, axis);
}
Expr max(const Expr& a, int axis) {
  return reduce(Op::max, a, axis);
}
Expr min(const Expr& a, int axis) {
  return reduce(Op::min, a, axis);
}
Expr mean(const Expr& a, int axis) {
  return reduce(Op::mean, a, axis);
}
Expr argmax(const Expr& a, int axis) {
  return reduce(Op::argmax, a, axis);
}
Expr argmin(const Expr& a, int axis) {
  return reduce(Op::argmin, a, axis);
}
Expr sum(const Expr& a) {
  return reduce(Op::sum, a, ir::kAllAxes);
}
Expr max(const Expr& a) {
  return reduce(Op::max, a, ir::kAllAxes);
}
Expr min(const Expr& a) {
  return reduce(Op::min, a, ir::kAllAxes);
}
Expr mean(const Expr& a) {
  return reduce(Op::mean, a, ir::kAllAxes);
}
Expr argmax(const Expr& a) {
  return reduce(Op::argmax, a, ir::kAllAxes);
}
Expr argmin(const Expr& a) {
  return reduce(Op::argmin, a, ir::kAllAxes);
}

}  // namespace flexkit
