// Scalar evaluation of one step op through the shared op math: what constant folding uses, and
// what the CPU interpreter's per-op loops call lane by lane.
#pragma once
#include "flexkit/portable/ew_ops.hpp"
#include "flexkit/portable/neuron_ops.hpp"
#include "ir/step_kernel.hpp"

namespace flexkit::snn {

inline float eval_step_op(const StepInstr& in, float a, float b, float c) {
  namespace p = ::flexkit::portable;
  switch (in.op) {
    case StepOp::constant:
      return in.constant;
    case StepOp::seq_in:
    case StepOp::carried:
    case StepOp::param:
      return a;  // leaves are loaded, not evaluated
    case StepOp::neg:
      return p::ew_neg(a);
    case StepOp::abs:
      return p::ew_abs(a);
    case StepOp::sqr:
      return p::ew_sqr(a);
    case StepOp::sqrt:
      return p::ew_sqrt(a);
    case StepOp::exp:
      return p::ew_exp(a);
    case StepOp::exp2:
      return p::ew_exp2(a);
    case StepOp::log:
      return p::ew_log(a);
    case StepOp::log2:
      return p::ew_log2(a);
    case StepOp::sig:
      return p::ew_sig(a);
    case StepOp::sig2:
      return p::ew_sig2(a);
    case StepOp::tanh:
      return p::ew_tanh(a);
    case StepOp::tanh2:
      return p::ew_tanh2(a);
    case StepOp::reciprocal:
      return p::ew_reciprocal(a);
    case StepOp::floor:
      return p::ew_floor(a);
    case StepOp::ceil:
      return p::ew_ceil(a);
    case StepOp::sign:
      return p::ew_sign(a);
    case StepOp::spike:
      return p::ew_spike(a);
    case StepOp::spike_grad:
      return p::ew_surrogate_grad(static_cast<int>(in.surrogate), in.alpha, a);
    case StepOp::detach:
      return a;
    case StepOp::add:
      return p::ew_add(a, b);
    case StepOp::sub:
      return p::ew_sub(a, b);
    case StepOp::mul:
      return p::ew_mul(a, b);
    case StepOp::div:
      return p::ew_div(a, b);
    case StepOp::pow:
      return p::ew_pow(a, b);
    case StepOp::eq:
      return p::ew_eq(a, b);
    case StepOp::ne:
      return p::ew_ne(a, b);
    case StepOp::lt:
      return p::ew_lt(a, b);
    case StepOp::le:
      return p::ew_le(a, b);
    case StepOp::gt:
      return p::ew_gt(a, b);
    case StepOp::ge:
      return p::ew_ge(a, b);
    case StepOp::maximum:
      return p::ew_maximum(a, b);
    case StepOp::minimum:
      return p::ew_minimum(a, b);
    case StepOp::where:
      return p::ew_where(a, b, c);
    case StepOp::clip:
      return p::ew_clip(a, b, c);
  }
  return 0.0f;
}

}  // namespace flexkit::snn
