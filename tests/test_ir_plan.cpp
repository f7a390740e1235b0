// The expression planner: equal subtrees — the same object or an equal tree built again — are
// computed once (value numbering), distinct ones are not merged, a reduction read twice gets one
// stage, and the planned programs still compute the right values (float64 on the host).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "flexkit/expr.hpp"
#include "ir/plan.hpp"

namespace flexkit::ir {
namespace {

Array values(std::vector<float> v) {
  const auto n = static_cast<std::int64_t>(v.size());
  return Array::from_vector(v, {n});
}

int count(const Program& p, Op op) {
  int n = 0;
  for (const Instr& i : p.code) n += i.op == op;
  return n;
}

TEST(IrPlan, EqualSubtreesAreComputedOnce) {
  const Array a = values({0.5f, -1.0f, 2.0f}), b = values({1.5f, 0.25f, -3.0f});
  Array out = Array::empty({3}, DType::f32);
  const Expr shared = a * b;
  // The same object twice, and an equal tree built again: one multiply, one sig.
  const Expr e = sig(shared) + sig(shared) * sig(a * b);
  const Plan plan = make_plan(out, e.node(), {});
  ASSERT_EQ(plan.stages.size(), 1u);
  const Program& p = plan.stages[0].body;
  EXPECT_EQ(p.operands.size(), 2u);
  EXPECT_EQ(count(p, Op::mul), 2);  // a * b, and sig · sig
  EXPECT_EQ(count(p, Op::sig), 1);
  EXPECT_EQ(p.code.size(), 6u) << to_string(p);  // a, b, a*b, sig, sig*sig, +
  assign(out, e);
  const std::vector<float> got = out.to_floats();
  const std::vector<double> av{0.5, -1.0, 2.0}, bv{1.5, 0.25, -3.0};
  for (std::size_t i = 0; i < 3; ++i) {
    const double s = 1.0 / (1.0 + std::exp(-av[i] * bv[i]));
    EXPECT_NEAR(got[i], s + s * s, 1e-6) << i;
  }
}

TEST(IrPlan, DistinctValuesStayDistinct) {
  const Array a = values({1.0f, 2.0f}), b = values({3.0f, 4.0f});
  Array out = Array::empty({2}, DType::f32);
  // a − b and b − a have the same op and leaves in another order; 2 and 2.0000001 differ.
  const Expr e = (Expr(a) - b) * 2.0 + (Expr(b) - a) * 2.0000001 + (Expr(a) - b) * 2.0;
  const Plan plan = make_plan(out, e.node(), {});
  const Program& p = plan.stages[0].body;
  EXPECT_EQ(count(p, Op::sub), 2) << to_string(p);
  EXPECT_EQ(p.scalars.size(), 2u);
  EXPECT_EQ(count(p, Op::mul), 2);  // (a − b) · 2 once, (b − a) · 2.0000001 once
  assign(out, e);
  const std::vector<float> got = out.to_floats();
  EXPECT_NEAR(got[0], -2.0 * 2 + 2.0 * 2.0000001 - 2.0 * 2, 1e-5);
  EXPECT_NEAR(got[1], -2.0 * 2 + 2.0 * 2.0000001 - 2.0 * 2, 1e-5);
}

TEST(IrPlan, AReductionReadTwiceIsOneStage) {
  const Array x = Array::from_vector(std::vector<float>{1, 5, 2, -1, 0, 3}, {2, 3});
  Array out = Array::empty({2, 3}, DType::f32);
  // max(x, 1) built twice: one reduction stage, then the elementwise one.
  const Expr e = (Expr(x) - max(Expr(x), 1)) * max(Expr(x), 1);
  const Plan plan = make_plan(out, e.node(), {});
  ASSERT_EQ(plan.stages.size(), 2u);
  EXPECT_TRUE(plan.stages[0].reduce.has_value());
  EXPECT_EQ(plan.stages[1].body.operands.size(), 2u);  // x and the row maxima
  assign(out, e);
  EXPECT_EQ(out.to_floats(), (std::vector<float>{-20, 0, -15, -12, -9, 0}));
}

}  // namespace
}  // namespace flexkit::ir
