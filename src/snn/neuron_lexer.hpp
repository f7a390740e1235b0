// Tokens of the neuron language. The whole text is tokenised up front (it is bounded by
// kMaxNeuronSourceBytes), which keeps the parser free of look-ahead bookkeeping.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "snn/neuron_ast.hpp"

namespace flexkit::snn {

enum class TokenKind : std::uint8_t {
  kIdent,
  kNumber,
  kLParen,
  kRParen,
  kLBrace,
  kRBrace,
  kLBracket,
  kRBracket,
  kSemicolon,
  kComma,
  kAssign,
  kArrow,
  kPlus,
  kMinus,
  kStar,
  kSlash,
  kLt,
  kLe,
  kGt,
  kGe,
  kEq,
  kNe,
  kEnd,
  kError,  // text the lexer rejects; the message is in Tokens::error
};

struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string_view text;  // a view into the source
  double number = 0.0;    // kNumber
  SourcePos pos;
};

// How a token is shown in "expected X, found Y" messages.
std::string describe(const Token& token);
std::string_view describe(TokenKind kind);

// Where errors are reported: the neuron's name once it is known, otherwise the origin.
struct ErrorContext {
  std::string_view origin;
  std::string neuron;  // empty until parsed
};

[[noreturn]] void fail(const ErrorContext& context, SourcePos pos, const std::string& what);

struct Tokens {
  std::vector<Token> tokens;  // ends with one kEnd or kError token
  std::string error;          // why the kError token was rejected
};

// Tokens of text. A character outside the language or a malformed or out-of-range number ends
// the list with a kError token instead of throwing, so that the parser reports it when it gets
// there, by then knowing the neuron's name. Oversized input throws NeuronError at once.
Tokens tokenize(std::string_view text, const ErrorContext& context);

}  // namespace flexkit::snn
