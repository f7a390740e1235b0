// FlexSN neuron language: a neuron's single-step body as text.
//
// Grammar (EBNF; `#` and `//` start comments running to the end of the line):
//
//   neuron     = "neuron" IDENT "(" idents [ ";" [ idents ] ] ")" "->" outputs
//                "{" { param | init } { assignment } "}" END ;
//   idents     = IDENT { "," IDENT } ;                      (inputs: at least one)
//   outputs    = idents | "(" idents ")" ;
//   param      = [ "learnable" ] "param" IDENT [ "[" "]" ] "=" [ "+" | "-" ] NUMBER ";" ;
//   init       = "init" IDENT "=" expr ";" ;     (a state's value before the first step)
//   assignment = IDENT "=" expr ";" ;
//   expr       = sum { ( "<" | "<=" | ">" | ">=" | "==" | "!=" ) sum } ;   (true 1.0, false 0.0)
//   sum        = term { ( "+" | "-" ) term } ;
//   term       = unary { ( "*" | "/" ) unary } ;
//   unary      = "-" unary | primary ;
//   primary    = NUMBER | IDENT | call | "(" expr ")" ;
//   call       = FUNCTION "(" expr { "," expr } ")"
//              | "detach" "(" expr ")"
//              | "spike" "(" expr [ "," SURROGATE [ "(" [ "+" | "-" ] NUMBER ")" ] ] ")" ;
//   NUMBER     = ( digits [ "." [ digits ] ] | "." digits )
//                [ ( "e" | "E" ) [ "+" | "-" ] digits ] ;
//
// FUNCTION (arity): abs sqr sqrt exp exp2 log log2 sig sig2 tanh tanh2 reciprocal floor ceil
// sign (1); pow maximum minimum (2); clip where (3). SURROGATE (default α): sigmoid (4), atan (2),
// piecewise_quadratic (1), piecewise_exp (1), soft_sign (2), super_spike (1), erf (2).
// Keywords `neuron`, `param`, `learnable` and `init` cannot name values. There is no `**`,
// `?:`, `&&` or `||`: write pow(x, 2), where(c, a, b), and combine conditions with where or by
// multiplying their 0/1 values.
//
// A number must be followed by neither a letter, a digit nor '.' ("12abc", "1.2.3" are errors),
// and must be representable as a finite, non-underflowing double.
//
// Semantics: statements run in order. Inputs and parameters are read-only. A state read before
// its assignment sees the previous step's value, after it the new value; every state must be
// assigned at least once, and so must every output. Any other assigned name is a temporary and
// must be assigned before it is read. Parameters are declared before the first assignment.
// A state without `init` starts at 0 when the caller gives no initial value; an init value reads
// only numbers and fixed (not learnable, not per-neuron) scalar parameters declared before it.
//
// Limits (so that no input crashes, hangs or exhausts the stack): kMaxNeuronSourceBytes of text
// and expressions at most kMaxNeuronExprDepth deep.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "flexkit/error.hpp"

namespace flexkit {

// The spec is defined with the rest of the syntax tree in src/snn/neuron_ast.hpp, which the
// library's later stages (lowering, differentiation) and its tests include.
namespace snn {
struct NeuronSpec;
}

// A neuron text that is not a valid neuron. The message names the neuron (or, before its name is
// read, the origin) and line:column, e.g. "neuron lif, line 3:7: unknown name 'vv'".
class NeuronError : public ValueError {
 public:
  NeuronError(const std::string& message, int line, int column)
      : ValueError(message), line_(line), column_(column) {}
  int line() const { return line_; }
  int column() const { return column_; }

 private:
  int line_;
  int column_;
};

inline constexpr std::size_t kMaxNeuronSourceBytes = std::size_t{1} << 20;
inline constexpr int kMaxNeuronExprDepth = 256;

// Parses and checks one neuron. origin names the text in errors raised before the neuron's name
// is known (a file name, "<string>", "--neuron").
snn::NeuronSpec parse_neuron(std::string_view text, std::string_view origin = "<string>");

// Canonical text of a spec: parse_neuron(to_string(s)) == s, and printing that again gives the
// same text.
std::string to_string(const snn::NeuronSpec& spec);

// The spec with parameter `name` defaulting to value; an unknown name or a non-finite value is a
// NeuronError naming the available parameters.
snn::NeuronSpec with_parameter(snn::NeuronSpec spec, std::string_view name, double value);

// Built-in neurons (if, lif, plif, alif, izhikevich, eif, qif), written in the language.
std::string_view builtin_neuron_source(std::string_view name);
std::vector<std::string> builtin_neuron_names();

// Throws ValueError when `value` lies outside the domain of parameter `param` of built-in neuron
// `neuron`, stating the domain, e.g. "neuron lif: tau must be > 0 (got -3)". Parameters of other
// neurons, and names a built-in lacks, pass.
void check_builtin_parameter(std::string_view neuron, std::string_view param, double value);

}  // namespace flexkit
