// The neuron language front end: parsing, name resolution, errors with positions, the canonical
// printer, parameter overrides, the built-in neurons and the fuzz corpus.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "flexkit/neuron_language.hpp"
#include "snn/neuron_ast.hpp"

namespace flexkit {
namespace {

using snn::ExprKind;
using snn::NameKind;
using snn::NeuronSpec;

constexpr const char* kSpecLif = R"(# comment to end of line
neuron lif(x; v) -> s {
  param tau = 2.0;                 # scalar parameter
  param v_th = 1.0;
  param v_reset = 0.0;
  learnable param w[] = -0.5;      // per-neuron and learnable
  h = v + (x - v) / tau;
  s = spike(h - v_th, sigmoid(4.0));
  v = h * (1 - s);
}
)";

// The message of the NeuronError that parsing text throws; fails the test when none is thrown.
std::string error_of(std::string_view text) {
  try {
    parse_neuron(text);
  } catch (const NeuronError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error for:\n" << text;
  return "";
}

TEST(NeuronLanguage, SpecLifExampleParsesToTheExpectedSpec) {
  NeuronSpec spec = parse_neuron(kSpecLif);
  EXPECT_EQ(spec.name, "lif");
  EXPECT_EQ(spec.inputs, std::vector<std::string>{"x"});
  EXPECT_EQ(spec.states, std::vector<std::string>{"v"});
  EXPECT_EQ(spec.outputs, std::vector<std::string>{"s"});
  EXPECT_EQ(spec.pos.line, 2);
  EXPECT_EQ(spec.pos.column, 8);
  ASSERT_EQ(spec.params.size(), 4u);
  EXPECT_EQ(spec.params[0].name, "tau");
  EXPECT_EQ(spec.params[0].default_value, 2.0);
  EXPECT_FALSE(spec.params[0].per_neuron);
  EXPECT_FALSE(spec.params[0].learnable);
  EXPECT_EQ(spec.params[3].name, "w");
  EXPECT_EQ(spec.params[3].default_value, -0.5);
  EXPECT_TRUE(spec.params[3].per_neuron);
  EXPECT_TRUE(spec.params[3].learnable);

  ASSERT_EQ(spec.statements.size(), 3u);
  const snn::Statement& h = spec.statements[0];
  EXPECT_EQ(h.target, "h");
  EXPECT_EQ(h.target_kind, NameKind::kTemp);
  EXPECT_EQ(h.pos.line, 7);
  EXPECT_EQ(h.pos.column, 3);
  // v + ((x - v) / tau): precedence and the old value of v.
  ASSERT_EQ(h.value->kind, ExprKind::kBinary);
  EXPECT_EQ(h.value->op, snn::BinaryOp::kAdd);
  EXPECT_EQ(h.value->args[0]->name_kind, NameKind::kStateOld);
  const snn::Expr& div = *h.value->args[1];
  EXPECT_EQ(div.op, snn::BinaryOp::kDiv);
  EXPECT_EQ(div.args[0]->op, snn::BinaryOp::kSub);
  EXPECT_EQ(div.args[0]->args[0]->name_kind, NameKind::kInput);
  EXPECT_EQ(div.args[1]->name_kind, NameKind::kParam);

  const snn::Statement& s = spec.statements[1];
  EXPECT_EQ(s.target_kind, NameKind::kOutput);
  ASSERT_EQ(s.value->kind, ExprKind::kSpike);
  EXPECT_EQ(s.value->surrogate, snn::Surrogate::kSigmoid);
  EXPECT_EQ(s.value->alpha, 4.0);
  EXPECT_EQ(s.value->args[0]->args[0]->name_kind, NameKind::kTemp);

  const snn::Statement& v = spec.statements[2];
  EXPECT_EQ(v.target_kind, NameKind::kStateNew);
  EXPECT_EQ(v.value->args[1]->args[1]->name_kind, NameKind::kOutput);
}

TEST(NeuronLanguage, StateReadAfterItsUpdateIsTheNewValue) {
  NeuronSpec spec = parse_neuron("neuron n(x; v) -> y { v = v + x; y = v * 2; }");
  EXPECT_EQ(spec.statements[0].value->args[0]->name_kind, NameKind::kStateOld);
  EXPECT_EQ(spec.statements[1].value->args[0]->name_kind, NameKind::kStateNew);
}

TEST(NeuronLanguage, HeaderForms) {
  EXPECT_TRUE(parse_neuron("neuron a(x) -> y { y = x; }").states.empty());
  EXPECT_TRUE(parse_neuron("neuron a(x;) -> y { y = x; }").states.empty());
  NeuronSpec spec = parse_neuron("neuron b(x, c; u, w) -> (y, z) { u = x; w = c; y = u; z = w; }");
  EXPECT_EQ(spec.inputs, (std::vector<std::string>{"x", "c"}));
  EXPECT_EQ(spec.states, (std::vector<std::string>{"u", "w"}));
  EXPECT_EQ(spec.outputs, (std::vector<std::string>{"y", "z"}));
}

TEST(NeuronLanguage, NumbersComparisonsAndSurrogates) {
  NeuronSpec spec = parse_neuron(
      "neuron n(x) -> (a, b, c) {\n"
      "  a = 1 + 2.5 * 1e3 - .5 + 3.e-2 + 2E+1 < x;\n"
      "  b = spike(x, atan(2.5)) + spike(x) + spike(x, erf);\n"
      "  c = -x == x != -(-x);\n"
      "}\n");
  EXPECT_EQ(spec.statements[0].value->op, snn::BinaryOp::kLt);
  const snn::Expr& b = *spec.statements[1].value;
  EXPECT_EQ(b.args[0]->args[0]->surrogate, snn::Surrogate::kAtan);
  EXPECT_EQ(b.args[0]->args[0]->alpha, 2.5);
  EXPECT_EQ(b.args[0]->args[1]->surrogate, snn::Surrogate::kSigmoid);
  EXPECT_EQ(b.args[1]->surrogate, snn::Surrogate::kErf);
  EXPECT_EQ(b.args[1]->alpha, 2.0);
  // Comparisons are left-associative at the lowest precedence.
  EXPECT_EQ(spec.statements[2].value->op, snn::BinaryOp::kNe);
  EXPECT_EQ(spec.statements[2].value->args[0]->op, snn::BinaryOp::kEq);
}

TEST(NeuronLanguage, EveryBuiltinParses) {
  std::vector<std::string> names = builtin_neuron_names();
  EXPECT_EQ(names,
            (std::vector<std::string>{"if", "lif", "plif", "alif", "izhikevich", "eif", "qif"}));
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    NeuronSpec spec = parse_neuron(builtin_neuron_source(name), name);
    EXPECT_EQ(spec.name, name);
    EXPECT_EQ(spec.inputs, std::vector<std::string>{"x"});
    EXPECT_EQ(spec.outputs, std::vector<std::string>{"s"});
  }
  EXPECT_EQ(parse_neuron(builtin_neuron_source("alif")).states.size(), 2u);
  EXPECT_EQ(parse_neuron(builtin_neuron_source("izhikevich")).states,
            (std::vector<std::string>{"v", "w"}));
  NeuronSpec plif = parse_neuron(builtin_neuron_source("plif"));
  EXPECT_EQ(plif.params[0].name, "w");
  EXPECT_TRUE(plif.params[0].learnable);
  EXPECT_THROW(builtin_neuron_source("hh"), NeuronError);
}

TEST(NeuronLanguage, PrintParsesBackToAnEqualSpec) {
  std::vector<std::string> texts;
  for (const std::string& name : builtin_neuron_names())
    texts.emplace_back(builtin_neuron_source(name));
  texts.emplace_back(kSpecLif);
  texts.emplace_back(
      "neuron n(x, y; v) -> (a, b) {\n"
      "  param p = 1e-7; param q[] = -0; learnable param r = 123456789.125;\n"
      "  t = (x - y) - (x - y) - x * (y / x) / (y * x) + -(x + y) + -x * --y;\n"
      "  a = (x < y) + (x >= (y == 0)) - clip(x, -1, 1) * pow(x, 2) / where(x > 0, x, y);\n"
      "  v = t - detach(v) + spike(v - p, piecewise_quadratic(0.1)) + sqr(q) + r + 0.1 + 3;\n"
      "  b = spike(v, soft_sign) * spike(v, super_spike(1.5)) + spike(v, piecewise_exp);\n"
      "}\n");
  for (const std::string& text : texts) {
    NeuronSpec spec = parse_neuron(text);
    std::string printed = to_string(spec);
    SCOPED_TRACE(printed);
    NeuronSpec again = parse_neuron(printed);
    EXPECT_TRUE(again == spec);
    EXPECT_EQ(to_string(again), printed);
  }
  // Equality sees differences.
  EXPECT_FALSE(parse_neuron("neuron n(x) -> y { y = x - x - x; }") ==
               parse_neuron("neuron n(x) -> y { y = x - (x - x); }"));
  EXPECT_EQ(to_string(parse_neuron("neuron n(x) -> y { y = x - (x - x); }")),
            "neuron n(x) -> y {\n  y = x - (x - x);\n}\n");
}

TEST(NeuronLanguage, WithParameterOverridesADefault) {
  NeuronSpec spec = parse_neuron(builtin_neuron_source("lif"));
  NeuronSpec changed = with_parameter(spec, "tau", 10.0);
  EXPECT_EQ(changed.params[0].default_value, 10.0);
  EXPECT_EQ(spec.params[0].default_value, 2.0);
  EXPECT_FALSE(changed == spec);
  EXPECT_TRUE(parse_neuron(to_string(changed)) == changed);
  try {
    with_parameter(spec, "taux", 1.0);
    FAIL() << "no error";
  } catch (const NeuronError& e) {
    EXPECT_STREQ(e.what(),
                 "neuron lif: no parameter 'taux'; its parameters are: tau, decay_input, "
                 "v_threshold, v_reset, soft_reset, detach_reset");
  }
  EXPECT_THROW(with_parameter(spec, "tau", std::numeric_limits<double>::infinity()), NeuronError);
  // The typed error is also a ValueError and an invalid_argument.
  EXPECT_THROW(with_parameter(spec, "nope", 1.0), ValueError);
  EXPECT_THROW(with_parameter(spec, "nope", 1.0), std::invalid_argument);
}

TEST(NeuronLanguage, SemanticErrorsNameTheNeuronAndPosition) {
  EXPECT_EQ(error_of("neuron lif(x; v) -> s {\n  h = v + x;\n  s = vv;\n  v = h;\n}"),
            "neuron lif, line 3:7: unknown name 'vv'");
  EXPECT_EQ(error_of("neuron n(x) -> s {\n  s = t;\n  t = x;\n}"),
            "neuron n, line 2:7: unknown name 't'");
  EXPECT_EQ(error_of("neuron n(x) -> s {\n  s = s + x;\n}"),
            "neuron n, line 2:7: unknown name 's' (an output is read only after it is assigned)");
  EXPECT_EQ(error_of("neuron n(x) -> s {\n  x = 1;\n  s = x;\n}"),
            "neuron n, line 2:3: cannot assign input 'x' (inputs are read-only)");
  EXPECT_EQ(error_of("neuron n(x) -> s {\n  param p = 1;\n  p = 2;\n  s = x;\n}"),
            "neuron n, line 3:3: cannot assign parameter 'p' (parameters are read-only; "
            "override them by name)");
  EXPECT_EQ(error_of("neuron n(x; x) -> s { s = x; }"),
            "neuron n, line 1:13: duplicate name 'x': already declared as an input at line 1:10");
  EXPECT_EQ(error_of("neuron n(x; v) -> v { v = x; }"),
            "neuron n, line 1:19: duplicate name 'v': already declared as a state at line 1:13");
  EXPECT_EQ(error_of("neuron n(x) -> (s, s) { s = x; }"),
            "neuron n, line 1:20: duplicate name 's': already declared as an output at line 1:17");
  EXPECT_EQ(error_of("neuron n(x) -> s {\n  param x = 1;\n  s = x;\n}"),
            "neuron n, line 2:9: duplicate name 'x': already declared as an input at line 1:10");
  EXPECT_EQ(error_of("neuron n(x) -> s {\n  param p = 1;\n  param p = 2;\n  s = x;\n}"),
            "neuron n, line 3:9: duplicate name 'p': already declared as a parameter at line 2:9");
  EXPECT_EQ(error_of("neuron n(x) -> (s, y) {\n  s = x;\n}"),
            "neuron n, line 1:20: output 'y' is never assigned");
  EXPECT_EQ(error_of("neuron n(x; v, u) -> s {\n  s = x;\n  v = s;\n}"),
            "neuron n, line 1:16: state 'u' is never updated");
  EXPECT_EQ(error_of("neuron n(x) -> s {\n  s = x;\n  param p = 1;\n}"),
            "neuron n, line 3:3: parameters must be declared before the first assignment (move "
            "this 'param' up)");
  EXPECT_EQ(error_of("neuron n(x) -> s {\n  param = 1;\n  s = x;\n}"),
            "neuron n, line 2:9: expected the parameter's name, found '='");
  EXPECT_EQ(error_of("neuron n(param) -> s { s = 1; }"),
            "neuron n, line 1:10: 'param' is a keyword and cannot name a value");
}

TEST(NeuronLanguage, ArityUnsupportedOpsAndSurrogateMisuse) {
  EXPECT_EQ(error_of("neuron n(x) -> s {\n  s = exp(x, 1);\n}"),
            "neuron n, line 2:7: wrong number of arguments: 'exp' takes 1 argument, got 2");
  EXPECT_EQ(error_of("neuron n(x) -> s { s = where(x, x); }"),
            "neuron n, line 1:24: wrong number of arguments: 'where' takes 3 arguments, got 2");
  EXPECT_EQ(error_of("neuron n(x) -> s { s = pow(); }"),
            "neuron n, line 1:24: wrong number of arguments: 'pow' takes 2 arguments, got 0");
  EXPECT_EQ(error_of("neuron n(x) -> s { s = spike(x, atan, 1); }"),
            "neuron n, line 1:24: wrong number of arguments: 'spike' takes 1 or 2 arguments");
  EXPECT_EQ(error_of("neuron n(x) -> s { s = detach(x, x); }"),
            "neuron n, line 1:24: wrong number of arguments: 'detach' takes 1 argument, got 2");
  std::string unsupported = error_of("neuron n(x) -> s {\n  s = 1 + sin(x);\n}");
  EXPECT_EQ(unsupported.rfind("neuron n, line 2:11: unsupported function 'sin'; supported: abs, "
                              "sqr, sqrt, exp, ",
                              0),
            0u)
      << unsupported;
  EXPECT_NE(unsupported.find("clip, where, detach, spike"), std::string::npos) << unsupported;
  EXPECT_EQ(error_of("neuron n(x) -> s { s = atan(x); }"),
            "neuron n, line 1:24: surrogate 'atan' can only appear as spike's second argument, "
            "as in spike(z, atan)");
  EXPECT_EQ(error_of("neuron n(x) -> s { s = x + sigmoid; }"),
            "neuron n, line 1:28: unknown name 'sigmoid' (a surrogate can only appear as spike's "
            "second argument)");
  EXPECT_EQ(error_of("neuron n(x) -> s { s = spike(x, tanh); }"),
            "neuron n, line 1:33: expected a surrogate as spike's second argument (sigmoid, atan, "
            "piecewise_quadratic, piecewise_exp, soft_sign, super_spike, erf), found name 'tanh'");
  EXPECT_EQ(error_of("neuron n(x) -> s { s = spike(x, atan(-1)); }"),
            "neuron n, line 1:38: a surrogate's alpha must be positive");
  EXPECT_EQ(error_of("neuron n(x) -> s { s = spike(x, atan(x)); }"),
            "neuron n, line 1:38: expected a number (the surrogate's alpha), found name 'x'");
}

TEST(NeuronLanguage, SyntaxErrorsSayWhatWasExpectedAndFound) {
  EXPECT_EQ(error_of("neuro lif(x) -> s { s = x; }"),
            "<string>, line 1:1: expected 'neuron', found name 'neuro'");
  EXPECT_EQ(error_of(""), "<string>, line 1:1: expected 'neuron', found end of input");
  EXPECT_EQ(error_of("neuron (x) -> s {}"),
            "<string>, line 1:8: expected the neuron's name, found '('");
  EXPECT_EQ(error_of("neuron n() -> s { s = 1; }"),
            "neuron n, line 1:10: expected an input name, found ')'");
  EXPECT_EQ(error_of("neuron n(x) s { s = x; }"),
            "neuron n, line 1:13: expected '->' before the outputs, found name 's'");
  EXPECT_EQ(error_of("neuron n(x) -> s {\n  s = x\n}"),
            "neuron n, line 3:1: expected ';' or an operator, found '}'");
  EXPECT_EQ(error_of("neuron n(x) -> s {\n  s = (x + 1;\n}"),
            "neuron n, line 2:13: expected ')' or an operator, found ';'");
  EXPECT_EQ(error_of("neuron n(x) -> s {\n  s = x * ;\n}"),
            "neuron n, line 2:11: expected an expression (a number, a name, a call or '('), found "
            "';'");
  EXPECT_EQ(error_of("neuron n(x) -> s { s = x; } extra"),
            "neuron n, line 1:29: expected end of input after the neuron's '}', found name "
            "'extra'");
  // Unterminated input.
  EXPECT_EQ(error_of("neuron n(x) -> s {\n  s = x;\n"),
            "neuron n, line 3:1: expected a statement ('param', 'init' or NAME = ...;) or '}', "
            "found end "
            "of input");
  EXPECT_EQ(error_of("neuron n(x) -> s { s = max(x"),
            "neuron n, line 1:24: unsupported function 'max'; supported: abs, sqr, sqrt, exp, "
            "exp2, log, log2, sig, sig2, tanh, tanh2, reciprocal, floor, ceil, sign, pow, "
            "maximum, minimum, clip, where, detach, spike");
  EXPECT_EQ(error_of("neuron n(x) -> s { s = exp(x"),
            "neuron n, line 1:29: expected ',' or ')' in the argument list, found end of input");
  // Characters outside the language; the origin names the text before the neuron's name is read.
  EXPECT_EQ(error_of("neuron @"), "<string>, line 1:8: unexpected character '@'");
  try {
    parse_neuron("\n  neuron 1x", "cell.neuron");
    FAIL();
  } catch (const NeuronError& e) {
    EXPECT_STREQ(e.what(), "cell.neuron, line 2:10: bad number '1x'");
  }
  try {
    parse_neuron("neuron n(x) -> s { s = x @ 1; }", "cell.neuron");
    FAIL();
  } catch (const NeuronError& e) {
    EXPECT_STREQ(e.what(), "neuron n, line 1:26: unexpected character '@'");
    EXPECT_EQ(e.line(), 1);
    EXPECT_EQ(e.column(), 26);
  }
  EXPECT_EQ(error_of("neuron n(x) -> s { s = x ! 1; }"),
            "neuron n, line 1:26: unexpected character '!' (did you mean '!='?)");
  EXPECT_EQ(error_of("neuron n(x) -> s { s = x\x01; }"),
            "neuron n, line 1:25: unexpected character byte 0x01");
}

TEST(NeuronLanguage, BadNumbers) {
  EXPECT_EQ(error_of("neuron n(x) -> s {\n  s = 1e;\n}"),
            "neuron n, line 2:7: bad number '1e': the exponent has no digits");
  EXPECT_EQ(error_of("neuron n(x) -> s { s = 1.2.3; }"), "neuron n, line 1:24: bad number '1.2.3'");
  EXPECT_EQ(error_of("neuron n(x) -> s { s = 12abc; }"), "neuron n, line 1:24: bad number '12abc'");
  EXPECT_EQ(error_of("neuron n(x) -> s { s = 1e999; }"),
            "neuron n, line 1:24: number '1e999' is out of range for a double");
  // A literal that underflows cannot be represented either.
  EXPECT_THROW(parse_neuron("neuron n(x) -> s { s = 1e-999; }"), NeuronError);
}

TEST(NeuronLanguage, DeepNestingAndHugeInputAreClearErrors) {
  std::string deep =
      "neuron n(x) -> s { s = " + std::string(100000, '(') + "x" + std::string(100000, ')') + "; }";
  EXPECT_NE(error_of(deep).find("expression nested too deeply (the limit is 256 levels)"),
            std::string::npos);
  std::string minus = "neuron n(x) -> s { s = " + std::string(100000, '-') + "x; }";
  EXPECT_NE(error_of(minus).find("nested too deeply"), std::string::npos);
  std::string calls = "neuron n(x) -> s { s = ";
  for (int i = 0; i < 10000; ++i) calls += "exp(";
  calls += "x" + std::string(10000, ')') + "; }";
  EXPECT_NE(error_of(calls).find("nested too deeply"), std::string::npos);
  // A long flat chain builds a deep left-leaning tree: also refused, and no recursion blows up.
  std::string chain = "neuron n(x) -> s { s = x";
  for (int i = 0; i < 100000; ++i) chain += " + x";
  chain += "; }";
  EXPECT_NE(error_of(chain).find("nested too deeply"), std::string::npos);
  // Just under the limit works and round-trips.
  std::string ok = "neuron n(x) -> s { s = x";
  for (int i = 0; i < 200; ++i) ok += " * x";
  ok += "; }";
  NeuronSpec spec = parse_neuron(ok);
  EXPECT_TRUE(parse_neuron(to_string(spec)) == spec);

  std::string huge = "neuron n(x) -> s { s = x; }" + std::string(kMaxNeuronSourceBytes, ' ');
  EXPECT_EQ(error_of(huge),
            "<string>, line 1:1: neuron text is 1048603 bytes; the limit is "
            "1048576");
  // Many statements within the size limit are fine (no per-statement recursion).
  std::string many = "neuron n(x) -> s {\n  s = x;\n";
  for (int i = 0; i < 20000; ++i) many += "  s = s + x;\n";
  many += "}";
  EXPECT_EQ(parse_neuron(many).statements.size(), 20001u);
}

#ifdef FLEXKIT_NEURON_CORPUS
// Every seed of the fuzz corpus either parses or throws the typed error; the ones that parse
// also print back to an equal spec.
TEST(NeuronLanguage, InitialValues) {
  NeuronSpec spec = parse_neuron(R"(neuron n(x; v, w) -> s {
    param v_reset = -0.2;
    init v = where(v_reset < 0, v_reset, 0) * 2;
    s = spike(v + x);
    v = x;
    w = s;
  })");
  ASSERT_EQ(spec.inits.size(), 1u);
  EXPECT_EQ(spec.inits[0].state, "v");
  EXPECT_TRUE(parse_neuron(to_string(spec)) == spec);
  EXPECT_EQ(error_of("neuron n(x; v) -> s { learnable param k = 1; init v = k; s = x; v = x; }"),
            "neuron n, line 1:55: an initial value may read only fixed scalar parameters; 'k' "
            "is learnable");
  EXPECT_EQ(error_of("neuron n(x; v) -> s { init v = x; s = x; v = x; }"),
            "neuron n, line 1:32: an initial value may read only numbers and parameters; 'x' is "
            "an input");
  EXPECT_EQ(error_of("neuron n(x; v) -> s { init x = 0; s = x; v = x; }"),
            "neuron n, line 1:28: 'init' names a state; 'x' is not one");
  EXPECT_EQ(error_of("neuron n(x; v) -> s { init v = 0; init v = 1; s = x; v = x; }"),
            "neuron n, line 1:40: duplicate 'init' for state 'v' (first at line 1:28)");
  EXPECT_EQ(error_of("neuron n(x; v) -> s { s = x; init v = 0; v = x; }"),
            "neuron n, line 1:30: initial values must be declared before the first assignment "
            "(move this 'init' up)");
}

TEST(NeuronLanguage, FuzzCorpusReplay) {
  std::filesystem::path dir(FLEXKIT_NEURON_CORPUS);
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  int files = 0;
  int parsed = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream buffer;
    buffer << in.rdbuf();
    std::string text = buffer.str();
    SCOPED_TRACE(entry.path().string());
    ++files;
    try {
      NeuronSpec spec = parse_neuron(text, entry.path().filename().string());
      EXPECT_TRUE(parse_neuron(to_string(spec)) == spec);
      ++parsed;
    } catch (const NeuronError& e) {
      EXPECT_NE(std::string(e.what()).find("line "), std::string::npos) << e.what();
    }
  }
  EXPECT_GE(files, 20);
  EXPECT_GE(parsed, 7);  // at least the built-ins
}
#endif

}  // namespace
}  // namespace flexkit
