// The CPU math of every elementwise op, in one place: the expression interpreter, the step-kernel
// executor and constant folding all evaluate through it, so they cannot disagree. Each op maps to
// its portable function (flexkit/portable/ew_ops.hpp, neuron_ops.hpp), the same code generated
// CUDA kernels call.
#pragma once
#include "flexkit/portable/ew_ops.hpp"
#include "flexkit/portable/neuron_ops.hpp"
#include "ir/op.hpp"

namespace flexkit::ir {

// Calls body(fn) with fn(a, b, c, j) the value of `in` at lane j of its argument lanes (a, b, c
// point at lanes; those past the op's arity are not read). The switch runs once, outside the
// caller's lane loop, so each loop inlines one op and stays vectorisable. Returns false (body
// not called) for ops that are not elementwise math: leaves, reductions and detach.
template <class Body>
bool with_op_math(const Instr& in, Body&& body) {
  namespace p = ::flexkit::portable;
#define FLEXKIT_OP1(name)                                                   \
  case Op::name:                                                            \
    body([](const float* __restrict a, const float*, const float*, int j) { \
      return p::ew_##name(a[j]);                                            \
    });                                                                     \
    return true;
#define FLEXKIT_OP2(name)                                                                \
  case Op::name:                                                                         \
    body([](const float* __restrict a, const float* __restrict b, const float*, int j) { \
      return p::ew_##name(a[j], b[j]);                                                   \
    });                                                                                  \
    return true;
#define FLEXKIT_OP3(name)                                                                    \
  case Op::name:                                                                             \
    body([](const float* __restrict a, const float* __restrict b, const float* __restrict c, \
            int j) { return p::ew_##name(a[j], b[j], c[j]); });                              \
    return true;
  switch (in.op) {
    FLEXKIT_OP1(neg)
    FLEXKIT_OP1(abs)
    FLEXKIT_OP1(sqr)
    FLEXKIT_OP1(sqrt)
    FLEXKIT_OP1(exp)
    FLEXKIT_OP1(exp2)
    FLEXKIT_OP1(log)
    FLEXKIT_OP1(log2)
    FLEXKIT_OP1(sig)
    FLEXKIT_OP1(sig2)
    FLEXKIT_OP1(tanh)
    FLEXKIT_OP1(tanh2)
    FLEXKIT_OP1(reciprocal)
    FLEXKIT_OP1(floor)
    FLEXKIT_OP1(ceil)
    FLEXKIT_OP1(sign)
    FLEXKIT_OP1(spike)
    FLEXKIT_OP2(add)
    FLEXKIT_OP2(sub)
    FLEXKIT_OP2(mul)
    FLEXKIT_OP2(div)
    FLEXKIT_OP2(pow)
    FLEXKIT_OP2(eq)
    FLEXKIT_OP2(ne)
    FLEXKIT_OP2(lt)
    FLEXKIT_OP2(le)
    FLEXKIT_OP2(gt)
    FLEXKIT_OP2(ge)
    FLEXKIT_OP2(maximum)
    FLEXKIT_OP2(minimum)
    FLEXKIT_OP3(where)
    FLEXKIT_OP3(clip)
    case Op::spike_grad: {
      const int kind = static_cast<int>(in.surrogate);
      const float alpha = in.alpha;
      body([kind, alpha](const float* __restrict a, const float*, const float*, int j) {
        return p::ew_surrogate_grad(kind, alpha, a[j]);
      });
      return true;
    }
    default:
      return false;
  }
#undef FLEXKIT_OP1
#undef FLEXKIT_OP2
#undef FLEXKIT_OP3
}

// One value of an elementwise op (constant folding); detach passes its argument through, and
// ops with_op_math does not take give 0.
inline float eval_op(const Instr& in, float a, float b, float c) {
  if (in.op == Op::detach) return a;
  if (in.op == Op::constant) return in.constant;
  float value = 0.0f;
  with_op_math(in, [&](auto fn) { value = fn(&a, &b, &c, 0); });
  return value;
}

}  // namespace flexkit::ir
