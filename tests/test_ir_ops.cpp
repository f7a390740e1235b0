// The one op table of the IR: every op's entry, its CPU math against a float64 reference, and
// (with CUDA) its device spelling. Expressions and step programs both evaluate through these, so
// a wrong entry shows here once instead of as two evaluators disagreeing.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <string>

#include "flexkit/error.hpp"
#include "ir/op.hpp"
#include "ir/op_eval.hpp"
#if FLEXKIT_HAVE_CUDA
#include "codegen/cuda_op_spelling.hpp"
#endif

namespace flexkit::ir {
namespace {

constexpr int kOps = static_cast<int>(Op::argmin) + 1;

Op op_at(int i) {
  return static_cast<Op>(i);
}

double sig(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

// Each elementwise op's meaning in float64, written from its definition (not from the code).
const std::map<Op, std::function<double(double, double, double)>>& references() {
  using F = std::function<double(double, double, double)>;
  static const std::map<Op, F> r = {
      {Op::neg, [](double a, double, double) { return -a; }},
      {Op::abs, [](double a, double, double) { return std::fabs(a); }},
      {Op::sqr, [](double a, double, double) { return a * a; }},
      {Op::sqrt, [](double a, double, double) { return std::sqrt(a); }},
      {Op::exp, [](double a, double, double) { return std::exp(a); }},
      {Op::exp2, [](double a, double, double) { return std::exp2(a); }},
      {Op::log, [](double a, double, double) { return std::log(a); }},
      {Op::log2, [](double a, double, double) { return std::log2(a); }},
      {Op::sig, [](double a, double, double) { return sig(a); }},
      {Op::sig2, [](double a, double, double) { return sig(a * std::log(2.0)); }},
      {Op::tanh, [](double a, double, double) { return std::tanh(a); }},
      {Op::tanh2, [](double a, double, double) { return std::tanh(a * std::log(2.0)); }},
      {Op::reciprocal, [](double a, double, double) { return 1.0 / a; }},
      {Op::floor, [](double a, double, double) { return std::floor(a); }},
      {Op::ceil, [](double a, double, double) { return std::ceil(a); }},
      {Op::sign, [](double a, double, double) { return a > 0 ? 1.0 : (a < 0 ? -1.0 : a); }},
      {Op::spike, [](double a, double, double) { return a >= 0 ? 1.0 : 0.0; }},
      // The sigmoid surrogate with alpha 4: d/dz sig(4 z) = 4 sig(4 z) sig(-4 z).
      {Op::spike_grad, [](double a, double, double) { return 4 * sig(4 * a) * sig(-4 * a); }},
      {Op::detach, [](double a, double, double) { return a; }},
      {Op::add, [](double a, double b, double) { return a + b; }},
      {Op::sub, [](double a, double b, double) { return a - b; }},
      {Op::mul, [](double a, double b, double) { return a * b; }},
      {Op::div, [](double a, double b, double) { return a / b; }},
      {Op::pow, [](double a, double b, double) { return std::pow(a, b); }},
      {Op::eq, [](double a, double b, double) { return a == b ? 1.0 : 0.0; }},
      {Op::ne, [](double a, double b, double) { return a != b ? 1.0 : 0.0; }},
      {Op::lt, [](double a, double b, double) { return a < b ? 1.0 : 0.0; }},
      {Op::le, [](double a, double b, double) { return a <= b ? 1.0 : 0.0; }},
      {Op::gt, [](double a, double b, double) { return a > b ? 1.0 : 0.0; }},
      {Op::ge, [](double a, double b, double) { return a >= b ? 1.0 : 0.0; }},
      {Op::maximum, [](double a, double b, double) { return a > b ? a : b; }},
      {Op::minimum, [](double a, double b, double) { return a < b ? a : b; }},
      {Op::where, [](double a, double b, double c) { return a != 0 ? b : c; }},
      {Op::clip, [](double a, double b, double c) { return std::min(std::max(a, b), c); }},
  };
  return r;
}

TEST(IrOps, TableEntriesAreConsistent) {
  for (int i = 0; i < kOps; ++i) {
    const Op op = op_at(i);
    const OpInfo& info = op_info(op);
    SCOPED_TRACE(std::string(info.name));
    EXPECT_FALSE(info.name.empty());
    EXPECT_TRUE(info.in_expressions || info.in_steps);
    for (int j = 0; j < i; ++j) EXPECT_NE(info.name, op_info(op_at(j)).name);
    switch (info.kind) {
      case OpKind::leaf:
        EXPECT_EQ(info.arity, 0);
        // Expression leaves and step leaves are disjoint: each program kind has its own.
        EXPECT_NE(info.in_expressions, info.in_steps);
        break;
      case OpKind::reduction:
        EXPECT_EQ(info.arity, 1);
        EXPECT_FALSE(info.in_steps);
        break;
      case OpKind::elementwise:
        EXPECT_GE(info.arity, 1);
        EXPECT_LE(info.arity, 3);
        EXPECT_TRUE(info.in_steps);  // a step body can use every elementwise op
        // Exactly the ops with a float64 reference above are elementwise.
        EXPECT_EQ(references().count(op), 1u);
        break;
    }
  }
  EXPECT_EQ(references().size(), 34u);
}

TEST(IrOps, CpuMathMatchesFloat64) {
  const float samples[] = {-3.5f, -1.0f, -0.25f, 0.0f, 0.5f, 1.0f, 2.0f, 7.25f};
  for (const auto& [op, reference] : references()) {
    Instr in;
    in.op = op;
    in.surrogate = Surrogate::kSigmoid;
    in.alpha = 4.0f;
    const int arity = op_info(op).arity;
    SCOPED_TRACE(std::string(op_info(op).name));
    EXPECT_EQ(with_op_math(in, [](auto) {}), op != Op::detach);
    for (float a : samples)
      for (float b : samples)
        for (float c : samples) {
          if (arity < 3 && c != samples[0]) continue;
          if (arity < 2 && b != samples[0]) continue;
          const double want = reference(a, b, c);
          const float got = eval_op(in, a, b, c);
          if (std::isnan(want)) {
            EXPECT_TRUE(std::isnan(got)) << a << ", " << b << ", " << c;
            continue;
          }
          const double tolerance = std::isinf(want) ? 0.0 : 4e-7 * std::fabs(want) + 1e-37;
          if (std::isinf(want))
            EXPECT_EQ(static_cast<double>(got), want) << a << ", " << b << ", " << c;
          else
            EXPECT_NEAR(got, want, tolerance) << a << ", " << b << ", " << c;
        }
  }
}

TEST(IrOps, LaneLoopsAgreeWithScalarEvaluation) {
  // What the interpreters run: one op over a chunk of lanes. The inputs come through a volatile,
  // so the compiler cannot fold either side at compile time (its folding rounds correctly, the
  // run-time library need not).
  volatile float start = -2.0f;
  float a[16], b[16], c[16], out[16];
  for (int j = 0; j < 16; ++j) {
    a[j] = start + 0.3f * static_cast<float>(j);
    b[j] = 1.5f - 0.2f * static_cast<float>(j) + (start + 2.0f);
    c[j] = static_cast<float>(j % 3) + (start + 2.0f);
  }
  for (const auto& entry : references()) {
    Instr in;
    in.op = entry.first;
    in.alpha = 2.0f;
    in.surrogate = Surrogate::kAtan;
    if (!with_op_math(in, [&](auto fn) {
          for (int j = 0; j < 16; ++j) out[j] = fn(a, b, c, j);
        }))
      continue;
    for (int j = 0; j < 16; ++j)
      EXPECT_EQ(std::bit_cast<unsigned>(out[j]),
                std::bit_cast<unsigned>(eval_op(in, a[j], b[j], c[j])))
          << op_info(in.op).name << " lane " << j;
  }
}

TEST(IrOps, LeavesAndReductionsAreNotMath) {
  for (Op op : {Op::operand, Op::scalar, Op::seq_in, Op::carried, Op::param, Op::sum, Op::argmax}) {
    Instr in;
    in.op = op;
    EXPECT_FALSE(with_op_math(in, [](auto) {})) << op_info(op).name;
  }
  Instr k;
  k.op = Op::constant;
  k.constant = 2.5f;
  EXPECT_EQ(eval_op(k, 0, 0, 0), 2.5f);
}

#if FLEXKIT_HAVE_CUDA
TEST(IrOps, DeviceSpellingCallsThePortableMath) {
  for (const auto& entry : references()) {
    Instr in;
    in.op = entry.first;
    const std::string name(op_info(in.op).name);
    const std::string call = codegen::device_op_call(in, "x", "y", "z");
    switch (in.op) {
      case Op::detach:
        EXPECT_EQ(call, "x");
        break;
      case Op::spike_grad:
        EXPECT_EQ(call.rfind("ew_surrogate_grad(kSurrogateSigmoid, ", 0), 0u) << call;
        break;
      default: {
        const int arity = op_info(in.op).arity;
        const std::string args = arity == 1 ? "x" : arity == 2 ? "x, y" : "x, y, z";
        EXPECT_EQ(call, "ew_" + name + "(" + args + ")");
      }
    }
  }
  Instr leaf;
  leaf.op = Op::seq_in;
  EXPECT_THROW(codegen::device_op_call(leaf, "x"), ValueError);
  leaf.op = Op::sum;
  EXPECT_THROW(codegen::device_op_call(leaf, "x"), ValueError);
}
#endif

}  // namespace
}  // namespace flexkit::ir
