#include "snn/neuron_lowering.hpp"

#include <cmath>
#include <map>

#include "core/text.hpp"
#include "flexkit/neuron_language.hpp"
#include "snn/step_builder.hpp"

namespace flexkit::snn {

namespace {

ir::Op binary_step_op(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd:
      return ir::Op::add;
    case BinaryOp::kSub:
      return ir::Op::sub;
    case BinaryOp::kMul:
      return ir::Op::mul;
    case BinaryOp::kDiv:
      return ir::Op::div;
    case BinaryOp::kLt:
      return ir::Op::lt;
    case BinaryOp::kLe:
      return ir::Op::le;
    case BinaryOp::kGt:
      return ir::Op::gt;
    case BinaryOp::kGe:
      return ir::Op::ge;
    case BinaryOp::kEq:
      return ir::Op::eq;
    case BinaryOp::kNe:
      return ir::Op::ne;
  }
  return ir::Op::add;
}

class Lowering {
 public:
  explicit Lowering(const NeuronSpec& spec) : spec_(spec) {}

  LoweredStep run() {
    LoweredStep out;
    out.num_inputs = spec_.inputs.size();
    for (std::size_t p = 0; p < spec_.params.size(); ++p) {
      const Param& param = spec_.params[p];
      if (param.learnable || param.per_neuron) {
        out.runtime_param_of.push_back(static_cast<int>(out.runtime_params.size()));
        out.runtime_params.push_back({param.name, param.per_neuron});
        out.learnable.push_back(param.learnable);
        param_value_[param.name] =
            b_.leaf(ir::Op::param, static_cast<int>(out.runtime_params.size() - 1));
      } else {
        out.runtime_param_of.push_back(-1);
        param_value_[param.name] = b_.constant(static_cast<float>(param.default_value));
      }
    }
    for (std::size_t i = 0; i < spec_.inputs.size(); ++i)
      input_value_[spec_.inputs[i]] = b_.leaf(ir::Op::seq_in, static_cast<int>(i));
    for (std::size_t k = 0; k < spec_.states.size(); ++k) {
      old_state_[spec_.states[k]] = b_.leaf(ir::Op::carried, static_cast<int>(k));
      current_[spec_.states[k]] = old_state_[spec_.states[k]];
    }
    for (const std::string& x : spec_.inputs) names_[input_value_.at(x)] = x;
    for (const std::string& v : spec_.states) names_[old_state_.at(v)] = v + " (previous step)";
    for (const Statement& s : spec_.statements) {
      const int value = lower(*s.value);
      current_[s.target] = value;
      names_.emplace(value, s.target);
    }
    for (const std::string& o : spec_.outputs) out.outputs.push_back(current_.at(o));
    for (const std::string& s : spec_.states) out.new_states.push_back(current_.at(s));
    out.body = b_.program();
    out.value_names.resize(out.body.instrs.size());
    for (const auto& [value, name] : names_)
      out.value_names[static_cast<std::size_t>(value)] = name;
    return out;
  }

 private:
  int lower(const Expr& e) {
    switch (e.kind) {
      case ExprKind::kNumber:
        return b_.constant(static_cast<float>(e.number));
      case ExprKind::kName:
        switch (e.name_kind) {
          case NameKind::kInput:
            return input_value_.at(e.name);
          case NameKind::kStateOld:
            return old_state_.at(e.name);
          case NameKind::kParam:
            return param_value_.at(e.name);
          case NameKind::kStateNew:
          case NameKind::kTemp:
          case NameKind::kOutput:
            return current_.at(e.name);
        }
        break;
      case ExprKind::kNeg:
        return b_.op(ir::Op::neg, lower(*e.args[0]));
      case ExprKind::kBinary:
        return b_.op(binary_step_op(e.op), lower(*e.args[0]), lower(*e.args[1]));
      case ExprKind::kCall: {
        std::vector<int> args;
        for (const ExprPtr& a : e.args) args.push_back(lower(*a));
        args.resize(3, -1);
        return b_.op(e.function, args[0], args[1], args[2]);
      }
      case ExprKind::kSpike:
        return b_.spike(lower(*e.args[0]), e.surrogate, static_cast<float>(e.alpha));
      case ExprKind::kDetach:
        return b_.op(ir::Op::detach, lower(*e.args[0]));
    }
    return b_.constant(0.0f);
  }

  const NeuronSpec& spec_;
  StepBuilder b_;
  std::map<std::string, int> param_value_, input_value_, old_state_, current_;
  std::map<int, std::string> names_;
};

// Double-precision evaluation of an init expression (numbers and fixed parameters only, which
// the parser guarantees).
double eval_init(const NeuronSpec& spec, const Expr& e) {
  auto arg = [&](std::size_t i) { return eval_init(spec, *e.args[i]); };
  switch (e.kind) {
    case ExprKind::kNumber:
      return e.number;
    case ExprKind::kName:
      for (const Param& p : spec.params)
        if (p.name == e.name) return p.default_value;
      return 0.0;
    case ExprKind::kNeg:
      return -arg(0);
    case ExprKind::kDetach:
      return arg(0);
    case ExprKind::kSpike:
      return arg(0) >= 0 ? 1.0 : 0.0;
    case ExprKind::kBinary: {
      const double a = arg(0), b = arg(1);
      switch (e.op) {
        case BinaryOp::kAdd:
          return a + b;
        case BinaryOp::kSub:
          return a - b;
        case BinaryOp::kMul:
          return a * b;
        case BinaryOp::kDiv:
          return a / b;
        case BinaryOp::kLt:
          return a < b;
        case BinaryOp::kLe:
          return a <= b;
        case BinaryOp::kGt:
          return a > b;
        case BinaryOp::kGe:
          return a >= b;
        case BinaryOp::kEq:
          return a == b;
        case BinaryOp::kNe:
          return a != b;
      }
      return 0.0;
    }
    case ExprKind::kCall: {
      const double a = arg(0);
      switch (e.function) {
        case ir::Op::abs:
          return std::fabs(a);
        case ir::Op::sqr:
          return a * a;
        case ir::Op::sqrt:
          return std::sqrt(a);
        case ir::Op::exp:
          return std::exp(a);
        case ir::Op::exp2:
          return std::exp2(a);
        case ir::Op::log:
          return std::log(a);
        case ir::Op::log2:
          return std::log2(a);
        case ir::Op::sig:
          return 1.0 / (1.0 + std::exp(-a));
        case ir::Op::sig2:
          return 1.0 / (1.0 + std::exp2(-a));
        case ir::Op::tanh:
          return std::tanh(a);
        case ir::Op::tanh2:
          return std::tanh(a * std::log(2.0));
        case ir::Op::reciprocal:
          return 1.0 / a;
        case ir::Op::floor:
          return std::floor(a);
        case ir::Op::ceil:
          return std::ceil(a);
        case ir::Op::sign:
          return a > 0 ? 1.0 : (a < 0 ? -1.0 : a);
        case ir::Op::pow:
          return std::pow(a, arg(1));
        case ir::Op::maximum:
          return std::fmax(a, arg(1));
        case ir::Op::minimum:
          return std::fmin(a, arg(1));
        case ir::Op::clip:
          return std::fmin(std::fmax(a, arg(1)), arg(2));
        case ir::Op::where:
          return a != 0 ? arg(1) : arg(2);
        default:  // the parser calls no other op by name
          break;
      }
      return 0.0;
    }
  }
  return 0.0;
}

}  // namespace

LoweredStep lower_neuron(const NeuronSpec& spec) {
  return Lowering(spec).run();
}

double state_initial_value(const NeuronSpec& spec, std::size_t state) {
  for (const StateInit& init : spec.inits)
    if (init.state == spec.states[state]) return eval_init(spec, *init.value);
  return 0.0;
}

}  // namespace flexkit::snn
