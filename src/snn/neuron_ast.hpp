// The syntax tree of a FlexSN neuron after semantic checks: every name reference already knows
// what it refers to (input, old or new state, parameter, temporary, output), so later stages
// (lowering onto the expression IR, differentiation) never resolve names again.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ir/op.hpp"

namespace flexkit::snn {

// 1-based line and column of the first character of a construct; 0:0 for built-in nodes.
struct SourcePos {
  int line = 0;
  int column = 0;
};

// What a name in an expression refers to. A state read before its update in the body sees the
// value from the previous step (kStateOld), after it the updated value (kStateNew).
enum class NameKind : std::uint8_t { kInput, kStateOld, kStateNew, kParam, kTemp, kOutput };

enum class BinaryOp : std::uint8_t { kAdd, kSub, kMul, kDiv, kLt, kLe, kGt, kGe, kEq, kNe };

enum class ExprKind : std::uint8_t { kNumber, kName, kNeg, kBinary, kCall, kSpike, kDetach };

struct Expr;
// Shared and immutable, so a NeuronSpec copies cheaply and with_parameter can take it by value.
using ExprPtr = std::shared_ptr<const Expr>;

struct Expr {
  ExprKind kind = ExprKind::kNumber;
  SourcePos pos;
  double number = 0.0;                        // kNumber (never negative: '-' is kNeg)
  std::string name;                           // kName
  NameKind name_kind = NameKind::kInput;      // kName
  BinaryOp op = BinaryOp::kAdd;               // kBinary
  ir::Op function = ir::Op::abs;              // kCall: the IR op the function names
  Surrogate surrogate = Surrogate::kSigmoid;  // kSpike
  double alpha = 0.0;                         // kSpike: the surrogate's α
  std::vector<ExprPtr> args;                  // operands, in source order
  int depth = 1;                              // height of this subtree; bounded by the parser
};

struct Param {
  std::string name;
  double default_value = 0.0;
  bool per_neuron = false;  // declared `name[]`: one value per neuron, initialised to the default
  bool learnable = false;   // gets a gradient
  SourcePos pos;
};

// `target = value;`. target_kind is kStateNew, kOutput or kTemp.
struct Statement {
  std::string target;
  NameKind target_kind = NameKind::kTemp;
  ExprPtr value;
  SourcePos pos;
};

// `init state = value;`: the state's value before the first step when the caller gives none.
// The value reads only numbers and fixed scalar parameters.
struct StateInit {
  std::string state;
  ExprPtr value;
  SourcePos pos;
};

struct NeuronSpec {
  std::string name;
  std::vector<std::string> inputs;
  std::vector<std::string> states;
  std::vector<std::string> outputs;
  std::vector<Param> params;
  std::vector<StateInit> inits;  // in declaration order; states without one start at 0
  std::vector<Statement> statements;
  SourcePos pos;  // of the neuron's name
};

// Structural equality; source positions and cached depths are ignored, so a spec equals the
// spec parsed back from its pretty print.
bool operator==(const Expr& a, const Expr& b);
bool operator==(const Param& a, const Param& b);
bool operator==(const Statement& a, const Statement& b);
bool operator==(const StateInit& a, const StateInit& b);
bool operator==(const NeuronSpec& a, const NeuronSpec& b);

// Names as written in the language (a function's name is its IR op's, ir::op_info).
double default_alpha(Surrogate s);
std::string_view binary_op_symbol(BinaryOp op);

}  // namespace flexkit::snn
