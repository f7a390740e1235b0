#include "snn/neuron_lexer.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/text.hpp"
#include "flexkit/neuron_language.hpp"

namespace flexkit::snn {

namespace {

bool is_ident_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_ident_char(char c) {
  return is_ident_start(c) || is_digit(c);
}

// A character as it can be shown in a message, whatever byte it is.
std::string show_char(char c) {
  if (c >= 0x20 && c < 0x7f) return detail::cat("'", c, "'");
  char buffer[8];
  std::snprintf(buffer, sizeof buffer, "0x%02X",
                static_cast<unsigned>(static_cast<unsigned char>(c)));
  return detail::cat("byte ", buffer);
}

}  // namespace

void fail(const ErrorContext& context, SourcePos pos, const std::string& what) {
  std::string where =
      context.neuron.empty() ? std::string(context.origin) : detail::cat("neuron ", context.neuron);
  throw NeuronError(detail::cat(where, ", line ", pos.line, ":", pos.column, ": ", what), pos.line,
                    pos.column);
}

std::string_view describe(TokenKind kind) {
  switch (kind) {
    case TokenKind::kIdent:
      return "a name";
    case TokenKind::kNumber:
      return "a number";
    case TokenKind::kLParen:
      return "'('";
    case TokenKind::kRParen:
      return "')'";
    case TokenKind::kLBrace:
      return "'{'";
    case TokenKind::kRBrace:
      return "'}'";
    case TokenKind::kLBracket:
      return "'['";
    case TokenKind::kRBracket:
      return "']'";
    case TokenKind::kSemicolon:
      return "';'";
    case TokenKind::kComma:
      return "','";
    case TokenKind::kAssign:
      return "'='";
    case TokenKind::kArrow:
      return "'->'";
    case TokenKind::kPlus:
      return "'+'";
    case TokenKind::kMinus:
      return "'-'";
    case TokenKind::kStar:
      return "'*'";
    case TokenKind::kSlash:
      return "'/'";
    case TokenKind::kLt:
      return "'<'";
    case TokenKind::kLe:
      return "'<='";
    case TokenKind::kGt:
      return "'>'";
    case TokenKind::kGe:
      return "'>='";
    case TokenKind::kEq:
      return "'=='";
    case TokenKind::kNe:
      return "'!='";
    case TokenKind::kEnd:
      return "end of input";
    case TokenKind::kError:
      return "invalid text";
  }
  return "?";
}

std::string describe(const Token& token) {
  // Long names are cut so that a hostile input cannot make messages huge.
  constexpr std::size_t kShown = 40;
  std::string_view text = token.text.substr(0, kShown);
  std::string_view more = token.text.size() > kShown ? "..." : "";
  if (token.kind == TokenKind::kIdent) return detail::cat("name '", text, more, "'");
  if (token.kind == TokenKind::kNumber) return detail::cat("number ", text, more);
  return std::string(describe(token.kind));
}

Tokens tokenize(std::string_view text, const ErrorContext& context) {
  if (text.size() > kMaxNeuronSourceBytes) {
    fail(context, {1, 1},
         detail::cat("neuron text is ", text.size(), " bytes; the limit is ",
                     kMaxNeuronSourceBytes));
  }
  Tokens result;
  std::vector<Token>& tokens = result.tokens;
  std::size_t i = 0;
  int line = 1;
  std::size_t line_start = 0;
  auto reject = [&](Token token, std::string message) {
    token.kind = TokenKind::kError;
    tokens.push_back(token);
    result.error = std::move(message);
    return result;
  };
  auto here = [&](std::size_t at) {
    return SourcePos{line, static_cast<int>(at - line_start) + 1};
  };
  while (true) {
    // Blanks and comments.
    while (i < text.size()) {
      char c = text[i];
      if (c == '\n') {
        ++i;
        ++line;
        line_start = i;
      } else if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
        ++i;
      } else if (c == '#' || (c == '/' && i + 1 < text.size() && text[i + 1] == '/')) {
        while (i < text.size() && text[i] != '\n') ++i;
      } else {
        break;
      }
    }
    Token token;
    token.pos = here(i);
    if (i == text.size()) {
      token.kind = TokenKind::kEnd;
      tokens.push_back(token);
      return result;
    }
    std::size_t start = i;
    char c = text[i];
    char next = i + 1 < text.size() ? text[i + 1] : '\0';
    if (is_ident_start(c)) {
      while (i < text.size() && is_ident_char(text[i])) ++i;
      token.kind = TokenKind::kIdent;
    } else if (is_digit(c) || (c == '.' && is_digit(next))) {
      while (i < text.size() && is_digit(text[i])) ++i;
      if (i < text.size() && text[i] == '.') {
        ++i;
        while (i < text.size() && is_digit(text[i])) ++i;
      }
      if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
        std::size_t e = i + 1;
        if (e < text.size() && (text[e] == '+' || text[e] == '-')) ++e;
        if (e >= text.size() || !is_digit(text[e])) {
          return reject(token, detail::cat("bad number '", text.substr(start, e - start),
                                           "': the exponent has no digits"));
        }
        i = e;
        while (i < text.size() && is_digit(text[i])) ++i;
      }
      if (i < text.size() && (is_ident_char(text[i]) || text[i] == '.')) {
        std::size_t end = i;
        while (end < text.size() && end - start < 40 &&
               (is_ident_char(text[end]) || text[end] == '.'))
          ++end;
        return reject(token, detail::cat("bad number '", text.substr(start, end - start), "'"));
      }
      token.kind = TokenKind::kNumber;
      const char* first = text.data() + start;
      const char* last = text.data() + i;
      auto [ptr, ec] = std::from_chars(first, last, token.number);
      if (ec == std::errc::result_out_of_range || !std::isfinite(token.number)) {
        return reject(
            token, detail::cat("number '", text.substr(start, std::min<std::size_t>(i - start, 40)),
                               "' is out of range for a double"));
      }
      if (ec != std::errc() || ptr != last) {
        return reject(token, detail::cat("bad number '", text.substr(start, i - start), "'"));
      }
    } else {
      i += 1;
      switch (c) {
        case '(':
          token.kind = TokenKind::kLParen;
          break;
        case ')':
          token.kind = TokenKind::kRParen;
          break;
        case '{':
          token.kind = TokenKind::kLBrace;
          break;
        case '}':
          token.kind = TokenKind::kRBrace;
          break;
        case '[':
          token.kind = TokenKind::kLBracket;
          break;
        case ']':
          token.kind = TokenKind::kRBracket;
          break;
        case ';':
          token.kind = TokenKind::kSemicolon;
          break;
        case ',':
          token.kind = TokenKind::kComma;
          break;
        case '+':
          token.kind = TokenKind::kPlus;
          break;
        case '*':
          if (next == '*') return reject(token, "'**' is not an operator; write pow(x, 2)");
          token.kind = TokenKind::kStar;
          break;
        case '?':
          return reject(token, "'?:' is not an operator; write where(a, b, c)");
        case '&':
        case '|':
          return reject(token, detail::cat("'", text.substr(start, next == c ? 2 : 1),
                                           "' is not an operator; combine conditions with "
                                           "where(...) or multiply 0/1 comparisons"));
        case '/':
          token.kind = TokenKind::kSlash;
          break;
        case '-':
          token.kind = next == '>' ? TokenKind::kArrow : TokenKind::kMinus;
          break;
        case '=':
          token.kind = next == '=' ? TokenKind::kEq : TokenKind::kAssign;
          break;
        case '<':
          token.kind = next == '=' ? TokenKind::kLe : TokenKind::kLt;
          break;
        case '>':
          token.kind = next == '=' ? TokenKind::kGe : TokenKind::kGt;
          break;
        case '!':
          if (next != '=') return reject(token, "unexpected character '!' (did you mean '!='?)");
          token.kind = TokenKind::kNe;
          break;
        default:
          return reject(token, detail::cat("unexpected character ", show_char(c)));
      }
      if (token.kind == TokenKind::kArrow || token.kind == TokenKind::kEq ||
          token.kind == TokenKind::kLe || token.kind == TokenKind::kGe ||
          token.kind == TokenKind::kNe)
        i += 1;
    }
    token.text = text.substr(start, i - start);
    tokens.push_back(token);
  }
}

}  // namespace flexkit::snn
