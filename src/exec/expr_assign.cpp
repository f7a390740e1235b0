// Running an assignment: plan it, resolve flex16 exponent policies, run each stage on the
// output's backend.
#include <cmath>

#include "backend/expr_backend.hpp"
#include "core/flex16_write.hpp"
#include "core/shard_agreement.hpp"
#include "core/storage.hpp"
#include "core/text.hpp"
#include "flexkit/error.hpp"
#include "flexkit/expr.hpp"
#include "ir/assign_signature.hpp"
#include "ir/plan.hpp"

namespace flexkit {

namespace {

void run(const ir::Stage& stage) {
  if (stage.target.device().is_cpu())
    backend::cpu::run_stage(stage);
  else
    backend::cuda::run_stage(stage);
}

// max |value| of what `body` evaluates to (NaN ignored), as a host number.
float max_abs_of(const ir::Program& body, Device device) {
  ir::Stage pass;
  pass.body = body;
  auto& code = pass.body.code;
  const std::int32_t v = static_cast<std::int32_t>(code.size() - 1);
  pass.body.scalars.push_back(0.0);
  const auto zero_slot = static_cast<std::int32_t>(pass.body.scalars.size() - 1);
  code.push_back({ir::Op::eq, v, v, -1, -1});  // 0 for NaN
  code.push_back({ir::Op::abs, v, -1, -1, -1});
  code.push_back({ir::Op::scalar, -1, -1, -1, zero_slot});
  const auto n = static_cast<std::int32_t>(code.size());
  code.push_back({ir::Op::where, n - 3, n - 2, n - 1, -1});
  pass.reduce = ir::Op::max;
  pass.axis = ir::kAllAxes;
  Shape ones(body.shape.size(), 1);
  pass.target = Array::empty(ones, DType::f32, device);
  run(pass);
  return pass.target.to_floats()[0];
}

// The smallest iwl at which every value up to max_abs stores without saturating: rounded to
// nearest, or (stochastic) rounded up.
int exact_iwl(float max_abs, bool stochastic) {
  int iwl = portable::flex16_iwl_holding(max_abs);
  if (stochastic && iwl < portable::kFlex16MaxIwl &&
      std::ceil(static_cast<double>(max_abs) * std::ldexp(1.0, 15 - iwl)) > portable::kFlex16MaxM)
    ++iwl;
  return iwl;
}

// IwlPolicy::exact: the smallest exponent that holds the stage's result, found by a max pass
// over the same program before the store.
void run_exact_flex16(const ir::Stage& stage) {
  Array target = stage.target;
  const bool stochastic = stage.stochastic_seed.has_value();
  if (!stage.reduce) {
    if (stage.target.size() > 0)
      target.set_iwl(
          exact_iwl(detail::agreed_max_abs(max_abs_of(stage.body, target.device())), stochastic));
    run(stage);
    return;
  }
  // A reduction's result is known only after reducing: reduce into f32, then store exactly.
  ir::Stage reduce = stage;
  reduce.target = Array::empty(stage.target.shape(), DType::f32, target.device());
  run(reduce);
  ir::Stage store;
  store.body.shape = stage.target.shape();
  store.body.operands = {reduce.target};
  store.body.code = {{ir::Op::operand, -1, -1, -1, 0}};
  store.target = stage.target;
  store.stochastic_seed = stage.stochastic_seed;
  if (stage.target.size() > 0)
    target.set_iwl(
        exact_iwl(detail::agreed_max_abs(max_abs_of(store.body, target.device())), stochastic));
  run(store);
}

Device device_of(const ir::NodePtr& node) {
  if (node->op == ir::Op::operand) return node->array.device();
  for (const auto& a : node->args) {
    Device d = device_of(a);
    if (d.is_cuda()) return d;
  }
  return Device::cpu();
}

bool reads(const ir::NodePtr& node, const Array& out) {
  if (node->op == ir::Op::operand && node->array.shares_storage(out)) return true;
  for (const auto& a : node->args)
    if (reads(a, out)) return true;
  return false;
}

}  // namespace

void assign(const Array& out, const Expr& e, const AssignOptions& options) {
  if (options.iwl) {
    check_iwl(*options.iwl, "assign");
    if (out.defined() && out.dtype() != DType::flex16)
      throw DTypeError(detail::cat("assign: an iwl was given but the output ", out.describe(),
                                   " is not flex16"));
  }
  const detail::Flex16WritePlan write =
      detail::plan_flex16_write(out, options.iwl_policy, options.iwl, "assign");
  AssignOptions resolved = options;
  resolved.iwl_policy = write.policy;
  resolved.iwl = write.iwl;
  // On CUDA, an assignment of a structure seen before runs what was described for it then.
  // The signature's buffers are kept from call to call on each thread (an assignment made while
  // another is being signed or run gets its own): growing them is most of signing's cost.
  thread_local ir::AssignSignature kept;
  thread_local bool kept_in_use = false;
  ir::AssignSignature own;
  ir::AssignSignature& signature = kept_in_use ? own : kept;
  struct InUse {
    bool& flag;
    bool previous;
    ~InUse() { flag = previous; }
  } in_use{kept_in_use, kept_in_use};
  kept_in_use = true;
  const bool signed_call = out.defined() && out.device().is_cuda() &&
                           ir::sign_assignment(out, e.node(), resolved, signature);
  if (signed_call) {
    if (auto cached = backend::cuda::find_assignment(signature)) {
      detail::prepare_flex16_write(out, write, signature.reads_out);
      if (resolved.iwl) {
        Array o = out;
        o.set_iwl(*resolved.iwl);
      }
      backend::cuda::run_assignment(*cached, signature, out, resolved.seed);
      detail::finish_flex16_write(out, write);
      return;
    }
  }
  ir::Plan plan = ir::make_plan(out, e.node(), resolved);
  detail::prepare_flex16_write(out, write, reads(e.node(), out));
  if (resolved.iwl) {
    Array o = out;
    o.set_iwl(*resolved.iwl);
  }
  // On CUDA, row-local plans (softmax, x - max(x, -1), ...) run as one kernel reading each row
  // once; anything else runs stage by stage.
  if (!(out.device().is_cuda() &&
        backend::cuda::run_row_fused(plan, signed_call ? &signature : nullptr))) {
    for (const ir::Stage& stage : plan.stages) {
      if (stage.target.dtype() == DType::flex16 && stage.iwl_policy == IwlPolicy::exact &&
          stage.target.shares_storage(out))
        run_exact_flex16(stage);
      else
        run(stage);
    }
    if (signed_call) backend::cuda::remember_assignment(signature, plan);
  }
  detail::finish_flex16_write(out, write);
}

Array evaluate(const Expr& e, DType dtype) {
  Array out = Array::empty(e.shape(), dtype, device_of(e.node()));
  assign(out, e, {.iwl_policy = IwlPolicy::exact});
  return out;
}

Array& Array::operator=(const Array& source) && {
  if (source.defined() && defined() && source.dtype() == dtype_)
    assign(source);
  else
    flexkit::assign(*this, Expr(source));
  return *this;
}

Array& Array::operator=(const Expr& e) {
  if (!defined())
    *this = evaluate(e);
  else
    flexkit::assign(*this, e);
  return *this;
}

Array& Array::operator+=(const Expr& e) {
  flexkit::assign(*this, Expr(*this) + e);
  return *this;
}
Array& Array::operator-=(const Expr& e) {
  flexkit::assign(*this, Expr(*this) - e);
  return *this;
}
Array& Array::operator*=(const Expr& e) {
  flexkit::assign(*this, Expr(*this) * e);
  return *this;
}
Array& Array::operator/=(const Expr& e) {
  flexkit::assign(*this, Expr(*this) / e);
  return *this;
}

}  // namespace flexkit
