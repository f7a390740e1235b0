// Neuron-language text written the way other languages would have it: outputs listed without
// parentheses are accepted; operators the language lacks are errors that name what to write.
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "flexkit/neuron_language.hpp"
#include "snn/neuron_ast.hpp"

namespace flexkit {
namespace {

using snn::NeuronSpec;

std::string error_of(std::string_view text) {
  try {
    parse_neuron(text);
  } catch (const NeuronError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error for:\n" << text;
  return "";
}

TEST(NeuronLanguageEdges, OutputsWithOrWithoutParentheses) {
  for (std::string_view text : {"neuron n(x; v) -> s, m { v = v + x; s = v > 1; m = v; }",
                                "neuron n(x; v) -> (s, m) { v = v + x; s = v > 1; m = v; }"}) {
    SCOPED_TRACE(text);
    NeuronSpec spec = parse_neuron(text);
    EXPECT_EQ(spec.outputs, (std::vector<std::string>{"s", "m"}));
    EXPECT_EQ(spec.states, std::vector<std::string>{"v"});
  }
  EXPECT_EQ(parse_neuron("neuron n(x) -> s { s = x; }").outputs, std::vector<std::string>{"s"});
  EXPECT_EQ(error_of("neuron n(x) -> s, { s = x; }"),
            "neuron n, line 1:19: expected an output name, found '{'");
}

TEST(NeuronLanguageEdges, MissingOperatorsNameTheirReplacement) {
  EXPECT_EQ(error_of("neuron n(x) -> s {\n  s = x ** 2;\n}"),
            "neuron n, line 2:9: '**' is not an operator; write pow(x, 2)");
  EXPECT_EQ(error_of("neuron n(x) -> s { s = x > 1 ? x : 0; }"),
            "neuron n, line 1:30: '?:' is not an operator; write where(a, b, c)");
  EXPECT_EQ(error_of("neuron n(x) -> s { s = x > 1 && x < 2; }"),
            "neuron n, line 1:30: '&&' is not an operator; combine conditions with where(...) "
            "or multiply 0/1 comparisons");
  EXPECT_EQ(error_of("neuron n(x) -> s { s = x > 1 || x < 2; }"),
            "neuron n, line 1:30: '||' is not an operator; combine conditions with where(...) "
            "or multiply 0/1 comparisons");
  try {
    parse_neuron("neuron n(x) -> s { s = x ** 2; }");
    FAIL() << "no error";
  } catch (const NeuronError& e) {
    EXPECT_EQ(e.line(), 1);
    EXPECT_EQ(e.column(), 26);
  }
}

}  // namespace
}  // namespace flexkit
