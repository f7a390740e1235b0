// The canonical text of a neuron, and the language's spelling of the AST's enums (shared with
// the parser so that both sides agree on every name).
#include <charconv>
#include <cmath>
#include <string>

#include "core/text.hpp"
#include "flexkit/neuron_language.hpp"
#include "snn/neuron_ast.hpp"

namespace flexkit::snn {

// SpikingJelly's defaults.
double default_alpha(Surrogate s) {
  switch (s) {
    case Surrogate::kSigmoid:
      return 4.0;
    case Surrogate::kAtan:
      return 2.0;
    case Surrogate::kPiecewiseQuadratic:
      return 1.0;
    case Surrogate::kPiecewiseExp:
      return 1.0;
    case Surrogate::kSoftSign:
      return 2.0;
    case Surrogate::kSuperSpike:
      return 1.0;
    case Surrogate::kErf:
      return 2.0;
  }
  return 1.0;
}

std::string_view binary_op_symbol(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd:
      return "+";
    case BinaryOp::kSub:
      return "-";
    case BinaryOp::kMul:
      return "*";
    case BinaryOp::kDiv:
      return "/";
    case BinaryOp::kLt:
      return "<";
    case BinaryOp::kLe:
      return "<=";
    case BinaryOp::kGt:
      return ">";
    case BinaryOp::kGe:
      return ">=";
    case BinaryOp::kEq:
      return "==";
    case BinaryOp::kNe:
      return "!=";
  }
  return "?";
}

bool operator==(const Expr& a, const Expr& b) {
  if (a.kind != b.kind || a.args.size() != b.args.size()) return false;
  switch (a.kind) {
    case ExprKind::kNumber:
      if (a.number != b.number || std::signbit(a.number) != std::signbit(b.number)) return false;
      break;
    case ExprKind::kName:
      if (a.name != b.name || a.name_kind != b.name_kind) return false;
      break;
    case ExprKind::kBinary:
      if (a.op != b.op) return false;
      break;
    case ExprKind::kCall:
      if (a.function != b.function) return false;
      break;
    case ExprKind::kSpike:
      if (a.surrogate != b.surrogate || a.alpha != b.alpha) return false;
      break;
    case ExprKind::kNeg:
    case ExprKind::kDetach:
      break;
  }
  for (std::size_t i = 0; i < a.args.size(); ++i) {
    if (!(*a.args[i] == *b.args[i])) return false;
  }
  return true;
}

bool operator==(const Param& a, const Param& b) {
  return a.name == b.name && a.default_value == b.default_value &&
         std::signbit(a.default_value) == std::signbit(b.default_value) &&
         a.per_neuron == b.per_neuron && a.learnable == b.learnable;
}

bool operator==(const Statement& a, const Statement& b) {
  return a.target == b.target && a.target_kind == b.target_kind && *a.value == *b.value;
}

bool operator==(const StateInit& a, const StateInit& b) {
  return a.state == b.state && *a.value == *b.value;
}

bool operator==(const NeuronSpec& a, const NeuronSpec& b) {
  return a.name == b.name && a.inputs == b.inputs && a.states == b.states &&
         a.outputs == b.outputs && a.params == b.params && a.inits == b.inits &&
         a.statements == b.statements;
}

namespace {

// Shortest text that reads back as exactly this double; always a valid NUMBER token (with a
// leading '-' where negative, which the grammar allows in the places a sign can appear).
std::string number_text(double value) {
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
  if (ec != std::errc()) return "0";
  std::string text(buffer, end);
  // to_chars writes "1e+20"; the lexer accepts it. Integers gain no ".0": "2" reads back as 2.
  return text;
}

// Binding strength: comparisons 1, + - 2, * / 3, unary minus 4, atoms 5.
int precedence(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kBinary:
      switch (e.op) {
        case BinaryOp::kAdd:
        case BinaryOp::kSub:
          return 2;
        case BinaryOp::kMul:
        case BinaryOp::kDiv:
          return 3;
        default:
          return 1;
      }
    case ExprKind::kNeg:
      return 4;
    default:
      return 5;
  }
}

void print(const Expr& e, std::string& out);

void print_operand(const Expr& e, bool parenthesise, std::string& out) {
  if (parenthesise) out += '(';
  print(e, out);
  if (parenthesise) out += ')';
}

void print_args(const Expr& e, std::string& out) {
  out += '(';
  for (std::size_t i = 0; i < e.args.size(); ++i) {
    if (i > 0) out += ", ";
    print(*e.args[i], out);
  }
  out += ')';
}

void print(const Expr& e, std::string& out) {
  switch (e.kind) {
    case ExprKind::kNumber:
      out += number_text(e.number);
      return;
    case ExprKind::kName:
      out += e.name;
      return;
    case ExprKind::kNeg:
      out += '-';
      print_operand(*e.args[0], precedence(*e.args[0]) < 4, out);
      return;
    case ExprKind::kBinary: {
      int p = precedence(e);
      // Left-associative: the right operand needs parentheses at equal strength.
      print_operand(*e.args[0], precedence(*e.args[0]) < p, out);
      out += detail::cat(" ", binary_op_symbol(e.op), " ");
      print_operand(*e.args[1], precedence(*e.args[1]) <= p, out);
      return;
    }
    case ExprKind::kCall:
      out += ir::op_info(e.function).name;
      print_args(e, out);
      return;
    case ExprKind::kDetach:
      out += "detach";
      print_args(e, out);
      return;
    case ExprKind::kSpike:
      out += "spike(";
      print(*e.args[0], out);
      out += detail::cat(", ", surrogate_name(e.surrogate), "(", number_text(e.alpha), "))");
      return;
  }
}

void print_list(const std::vector<std::string>& names, std::string& out) {
  for (std::size_t i = 0; i < names.size(); ++i) out += detail::cat(i > 0 ? ", " : "", names[i]);
}

}  // namespace

}  // namespace flexkit::snn

namespace flexkit {

std::string to_string(const snn::NeuronSpec& spec) {
  std::string out = detail::cat("neuron ", spec.name, "(");
  snn::print_list(spec.inputs, out);
  if (!spec.states.empty()) {
    out += "; ";
    snn::print_list(spec.states, out);
  }
  out += ") -> ";
  if (spec.outputs.size() == 1) {
    out += spec.outputs[0];
  } else {
    out += '(';
    snn::print_list(spec.outputs, out);
    out += ')';
  }
  out += " {\n";
  for (const snn::Param& param : spec.params) {
    out += detail::cat("  ", param.learnable ? "learnable " : "", "param ", param.name,
                       param.per_neuron ? "[]" : "", " = ", snn::number_text(param.default_value),
                       ";\n");
  }
  for (const snn::StateInit& init : spec.inits) {
    out += detail::cat("  init ", init.state, " = ");
    snn::print(*init.value, out);
    out += ";\n";
  }
  for (const snn::Statement& statement : spec.statements) {
    out += detail::cat("  ", statement.target, " = ");
    snn::print(*statement.value, out);
    out += ";\n";
  }
  out += "}\n";
  return out;
}

}  // namespace flexkit
