// Recursive-descent parser and semantic checks for the neuron language (grammar in
// include/flexkit/neuron_language.hpp). Names are resolved while parsing, statement by statement,
// which is what gives the body its sequential semantics.
#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <optional>

#include "core/text.hpp"
#include "flexkit/neuron_language.hpp"
#include "snn/neuron_ast.hpp"
#include "snn/neuron_lexer.hpp"

namespace flexkit::snn {

namespace {

// The IR ops the language calls by name (the others are spelled by operators, or by spike and
// detach).
constexpr std::array kFunctions = {
    ir::Op::abs,   ir::Op::sqr,        ir::Op::sqrt,    ir::Op::exp,  ir::Op::exp2,
    ir::Op::log,   ir::Op::log2,       ir::Op::sig,     ir::Op::sig2, ir::Op::tanh,
    ir::Op::tanh2, ir::Op::reciprocal, ir::Op::floor,   ir::Op::ceil, ir::Op::sign,
    ir::Op::pow,   ir::Op::maximum,    ir::Op::minimum, ir::Op::clip, ir::Op::where,
};
constexpr std::array kSurrogates = {
    Surrogate::kSigmoid,      Surrogate::kAtan,     Surrogate::kPiecewiseQuadratic,
    Surrogate::kPiecewiseExp, Surrogate::kSoftSign, Surrogate::kSuperSpike,
    Surrogate::kErf,
};

std::optional<ir::Op> find_function(std::string_view name) {
  for (ir::Op f : kFunctions)
    if (ir::op_info(f).name == name) return f;
  return std::nullopt;
}

std::optional<Surrogate> find_surrogate(std::string_view name) {
  for (Surrogate s : kSurrogates)
    if (surrogate_name(s) == name) return s;
  return std::nullopt;
}

std::string supported_functions() {
  std::string list;
  for (ir::Op f : kFunctions) list += detail::cat(list.empty() ? "" : ", ", ir::op_info(f).name);
  return list + ", detach, spike";
}

std::string supported_surrogates() {
  std::string list;
  for (Surrogate s : kSurrogates) list += detail::cat(list.empty() ? "" : ", ", surrogate_name(s));
  return list;
}

bool is_keyword(std::string_view name) {
  return name == "neuron" || name == "param" || name == "learnable" || name == "init";
}

// What a name currently denotes while the body is being read.
enum class Binding : std::uint8_t { kInput, kState, kOutput, kParam, kTemp };

struct NameInfo {
  Binding binding;
  bool assigned = false;  // states, outputs and temporaries
  SourcePos declared;
};

class Parser {
 public:
  Parser(std::string_view text, std::string_view origin) : context_{origin, {}} {
    Tokens lexed = tokenize(text, context_);
    tokens_ = std::move(lexed.tokens);
    lex_error_ = std::move(lexed.error);
  }

  NeuronSpec parse() {
    expect_keyword("neuron");
    const Token& name = expect(TokenKind::kIdent, "the neuron's name");
    check_not_keyword(name);
    spec_.name = std::string(name.text);
    spec_.pos = name.pos;
    context_.neuron = spec_.name;

    expect(TokenKind::kLParen, "'(' before the inputs");
    declare_list(spec_.inputs, Binding::kInput, "an input name");
    if (accept(TokenKind::kSemicolon) && peek().kind != TokenKind::kRParen)
      declare_list(spec_.states, Binding::kState, "a state name");
    expect(TokenKind::kRParen, "')' after the inputs and states");
    expect(TokenKind::kArrow, "'->' before the outputs");
    if (accept(TokenKind::kLParen)) {
      declare_list(spec_.outputs, Binding::kOutput, "an output name");
      expect(TokenKind::kRParen, "')' after the outputs");
    } else {
      declare(spec_.outputs, Binding::kOutput, "an output name or '('");
      while (accept(TokenKind::kComma)) declare(spec_.outputs, Binding::kOutput, "an output name");
    }
    expect(TokenKind::kLBrace, "'{' before the body");

    while (peek().kind != TokenKind::kRBrace) {
      const Token& t = peek();
      if (t.kind == TokenKind::kIdent && (t.text == "param" || t.text == "learnable")) {
        parse_param();
      } else if (t.kind == TokenKind::kIdent && t.text == "init") {
        parse_init();
      } else if (t.kind == TokenKind::kIdent) {
        parse_assignment();
      } else {
        fail(context_, t.pos,
             detail::cat("expected a statement ('param', 'init' or NAME = ...;) or '}', found ",
                         describe(t)));
      }
    }
    next();
    expect(TokenKind::kEnd, "end of input after the neuron's '}'");
    check_complete();
    return std::move(spec_);
  }

 private:
  // Text the lexer rejected is reported once the parser reaches it.
  const Token& peek() {
    const Token& t = tokens_[at_];
    if (t.kind == TokenKind::kError) fail(context_, t.pos, lex_error_);
    return t;
  }
  const Token& next() {
    const Token& t = peek();
    if (t.kind != TokenKind::kEnd) ++at_;
    return t;
  }
  bool accept(TokenKind kind) {
    if (peek().kind != kind) return false;
    next();
    return true;
  }
  const Token& expect(TokenKind kind, std::string_view what) {
    if (peek().kind != kind)
      fail(context_, peek().pos, detail::cat("expected ", what, ", found ", describe(peek())));
    return next();
  }
  void expect_keyword(std::string_view word) {
    if (peek().kind != TokenKind::kIdent || peek().text != word)
      fail(context_, peek().pos, detail::cat("expected '", word, "', found ", describe(peek())));
    next();
  }
  void check_not_keyword(const Token& t) {
    if (is_keyword(t.text))
      fail(context_, t.pos, detail::cat("'", t.text, "' is a keyword and cannot name a value"));
  }

  static std::string_view binding_word(Binding b) {
    switch (b) {
      case Binding::kInput:
        return "an input";
      case Binding::kState:
        return "a state";
      case Binding::kOutput:
        return "an output";
      case Binding::kParam:
        return "a parameter";
      case Binding::kTemp:
        return "a temporary";
    }
    return "?";
  }

  void bind(const Token& t, Binding binding) {
    check_not_keyword(t);
    std::string key(t.text);
    auto found = names_.find(key);
    if (found != names_.end()) {
      fail(context_, t.pos,
           detail::cat("duplicate name '", t.text, "': already declared as ",
                       binding_word(found->second.binding), " at line ",
                       found->second.declared.line, ":", found->second.declared.column));
    }
    names_.emplace(std::move(key), NameInfo{binding, false, t.pos});
  }

  void declare(std::vector<std::string>& list, Binding binding, std::string_view what) {
    const Token& t = expect(TokenKind::kIdent, what);
    bind(t, binding);
    list.emplace_back(t.text);
  }
  void declare_list(std::vector<std::string>& list, Binding binding, std::string_view what) {
    declare(list, binding, what);
    while (accept(TokenKind::kComma)) declare(list, binding, what);
  }

  void parse_param() {
    const Token& first = next();
    Param param;
    param.pos = first.pos;
    if (first.text == "learnable") {
      param.learnable = true;
      expect_keyword("param");
    }
    if (!spec_.statements.empty()) {
      fail(context_, first.pos,
           "parameters must be declared before the first assignment (move this 'param' up)");
    }
    const Token& name = expect(TokenKind::kIdent, "the parameter's name");
    bind(name, Binding::kParam);
    param.name = std::string(name.text);
    if (accept(TokenKind::kLBracket)) {
      expect(TokenKind::kRBracket, "']' (a per-neuron parameter is declared 'name[]')");
      param.per_neuron = true;
    }
    expect(TokenKind::kAssign, "'=' and the parameter's default value");
    double sign = 1.0;
    if (accept(TokenKind::kMinus)) {
      sign = -1.0;
    } else {
      accept(TokenKind::kPlus);
    }
    param.default_value = sign * expect(TokenKind::kNumber, "a number (the default value)").number;
    expect(TokenKind::kSemicolon, "';' after the parameter");
    spec_.params.push_back(std::move(param));
  }

  void parse_init() {
    const Token& first = next();
    if (!spec_.statements.empty()) {
      fail(context_, first.pos,
           "initial values must be declared before the first assignment (move this 'init' up)");
    }
    const Token& name = expect(TokenKind::kIdent, "the state's name");
    auto found = names_.find(std::string(name.text));
    if (found == names_.end() || found->second.binding != Binding::kState)
      fail(context_, name.pos, detail::cat("'init' names a state; '", name.text, "' is not one"));
    for (const StateInit& other : spec_.inits) {
      if (other.state == name.text)
        fail(context_, name.pos,
             detail::cat("duplicate 'init' for state '", name.text, "' (first at line ",
                         other.pos.line, ":", other.pos.column, ")"));
    }
    StateInit init;
    init.state = std::string(name.text);
    init.pos = name.pos;
    expect(TokenKind::kAssign, "'=' and the state's initial value");
    init.value = parse_expr();
    expect(TokenKind::kSemicolon, "';' or an operator");
    check_init_value(*init.value);
    spec_.inits.push_back(std::move(init));
  }

  // An initial value is computed once on the host, before any step: it may read numbers and
  // fixed scalar parameters only.
  void check_init_value(const Expr& e) {
    if (e.kind == ExprKind::kName) {
      const Param* param = nullptr;
      for (const Param& p : spec_.params)
        if (p.name == e.name) param = &p;
      if (!param)
        fail(context_, e.pos,
             detail::cat("an initial value may read only numbers and parameters; '", e.name,
                         "' is ", binding_word(names_.at(e.name).binding)));
      if (param->learnable || param->per_neuron)
        fail(context_, e.pos,
             detail::cat("an initial value may read only fixed scalar parameters; '", e.name,
                         "' is ", param->learnable ? "learnable" : "per-neuron"));
    }
    for (const ExprPtr& arg : e.args) check_init_value(*arg);
  }

  void parse_assignment() {
    const Token& target = next();
    check_not_keyword(target);
    expect(TokenKind::kAssign, detail::cat("'=' after '", target.text, "'"));
    ExprPtr value = parse_expr();
    expect(TokenKind::kSemicolon, "';' or an operator");

    // The target is resolved after the value, so `v = v + x` reads the old v.
    Statement statement;
    statement.target = std::string(target.text);
    statement.pos = target.pos;
    statement.value = std::move(value);
    auto found = names_.find(statement.target);
    if (found == names_.end()) {
      found = names_.emplace(statement.target, NameInfo{Binding::kTemp, false, target.pos}).first;
    }
    NameInfo& info = found->second;
    switch (info.binding) {
      case Binding::kInput:
        fail(context_, target.pos,
             detail::cat("cannot assign input '", target.text, "' (inputs are read-only)"));
      case Binding::kParam:
        fail(context_, target.pos,
             detail::cat("cannot assign parameter '", target.text,
                         "' (parameters are read-only; override them by name)"));
      case Binding::kState:
        statement.target_kind = NameKind::kStateNew;
        break;
      case Binding::kOutput:
        statement.target_kind = NameKind::kOutput;
        break;
      case Binding::kTemp:
        statement.target_kind = NameKind::kTemp;
        break;
    }
    info.assigned = true;
    spec_.statements.push_back(std::move(statement));
  }

  void check_complete() {
    for (const std::string& output : spec_.outputs) {
      const NameInfo& info = names_.at(output);
      if (!info.assigned)
        fail(context_, info.declared, detail::cat("output '", output, "' is never assigned"));
    }
    for (const std::string& state : spec_.states) {
      const NameInfo& info = names_.at(state);
      if (!info.assigned)
        fail(context_, info.declared, detail::cat("state '", state, "' is never updated"));
    }
  }

  // Expressions. Every constructed node is at most kMaxNeuronExprDepth high: this bounds the
  // parser's recursion and also every later recursive walk (printing, equality, destruction).
  ExprPtr make(Expr node) {
    int depth = 0;
    for (const ExprPtr& arg : node.args) depth = std::max(depth, arg->depth);
    node.depth = depth + 1;
    if (node.depth > kMaxNeuronExprDepth) too_deep(node.pos);
    return std::make_shared<const Expr>(std::move(node));
  }
  [[noreturn]] void too_deep(SourcePos pos) {
    fail(context_, pos,
         detail::cat("expression nested too deeply (the limit is ", kMaxNeuronExprDepth,
                     " levels); split it into temporaries"));
  }
  struct Nesting {
    explicit Nesting(Parser& p, SourcePos pos) : parser(p) {
      if (++parser.nesting_ > kMaxNeuronExprDepth) parser.too_deep(pos);
    }
    ~Nesting() { --parser.nesting_; }
    Nesting(const Nesting&) = delete;
    Nesting& operator=(const Nesting&) = delete;
    Parser& parser;
  };

  ExprPtr binary(BinaryOp op, SourcePos pos, ExprPtr lhs, ExprPtr rhs) {
    Expr node;
    node.kind = ExprKind::kBinary;
    node.op = op;
    node.pos = pos;
    node.args = {std::move(lhs), std::move(rhs)};
    return make(std::move(node));
  }

  ExprPtr parse_expr() {
    Nesting guard(*this, peek().pos);
    ExprPtr lhs = parse_sum();
    while (true) {
      BinaryOp op;
      switch (peek().kind) {
        case TokenKind::kLt:
          op = BinaryOp::kLt;
          break;
        case TokenKind::kLe:
          op = BinaryOp::kLe;
          break;
        case TokenKind::kGt:
          op = BinaryOp::kGt;
          break;
        case TokenKind::kGe:
          op = BinaryOp::kGe;
          break;
        case TokenKind::kEq:
          op = BinaryOp::kEq;
          break;
        case TokenKind::kNe:
          op = BinaryOp::kNe;
          break;
        default:
          return lhs;
      }
      SourcePos pos = next().pos;
      lhs = binary(op, pos, std::move(lhs), parse_sum());
    }
  }

  ExprPtr parse_sum() {
    ExprPtr lhs = parse_term();
    while (peek().kind == TokenKind::kPlus || peek().kind == TokenKind::kMinus) {
      const Token& t = next();
      BinaryOp op = t.kind == TokenKind::kPlus ? BinaryOp::kAdd : BinaryOp::kSub;
      lhs = binary(op, t.pos, std::move(lhs), parse_term());
    }
    return lhs;
  }

  ExprPtr parse_term() {
    ExprPtr lhs = parse_unary();
    while (peek().kind == TokenKind::kStar || peek().kind == TokenKind::kSlash) {
      const Token& t = next();
      BinaryOp op = t.kind == TokenKind::kStar ? BinaryOp::kMul : BinaryOp::kDiv;
      lhs = binary(op, t.pos, std::move(lhs), parse_unary());
    }
    return lhs;
  }

  ExprPtr parse_unary() {
    if (peek().kind != TokenKind::kMinus) return parse_primary();
    const Token& minus = next();
    Nesting guard(*this, minus.pos);
    Expr node;
    node.kind = ExprKind::kNeg;
    node.pos = minus.pos;
    node.args = {parse_unary()};
    return make(std::move(node));
  }

  ExprPtr parse_primary() {
    const Token& t = next();
    switch (t.kind) {
      case TokenKind::kNumber: {
        Expr node;
        node.kind = ExprKind::kNumber;
        node.pos = t.pos;
        node.number = t.number;
        return make(std::move(node));
      }
      case TokenKind::kLParen: {
        ExprPtr inner = parse_expr();
        expect(TokenKind::kRParen, "')' or an operator");
        return inner;
      }
      case TokenKind::kIdent:
        if (peek().kind == TokenKind::kLParen) return parse_call(t);
        return name_ref(t);
      default:
        fail(context_, t.pos,
             detail::cat("expected an expression (a number, a name, a call or '('), found ",
                         describe(t)));
    }
  }

  ExprPtr name_ref(const Token& t) {
    check_not_keyword(t);
    auto found = names_.find(std::string(t.text));
    Expr node;
    node.kind = ExprKind::kName;
    node.pos = t.pos;
    node.name = std::string(t.text);
    if (found == names_.end() ||
        (found->second.binding == Binding::kOutput && !found->second.assigned) ||
        (found->second.binding == Binding::kTemp && !found->second.assigned)) {
      std::string hint;
      if (found != names_.end()) {
        hint = " (an output is read only after it is assigned)";
      } else if (find_surrogate(t.text)) {
        hint = " (a surrogate can only appear as spike's second argument)";
      }
      fail(context_, t.pos, detail::cat("unknown name '", t.text, "'", hint));
    }
    switch (found->second.binding) {
      case Binding::kInput:
        node.name_kind = NameKind::kInput;
        break;
      case Binding::kState:
        node.name_kind = found->second.assigned ? NameKind::kStateNew : NameKind::kStateOld;
        break;
      case Binding::kOutput:
        node.name_kind = NameKind::kOutput;
        break;
      case Binding::kParam:
        node.name_kind = NameKind::kParam;
        break;
      case Binding::kTemp:
        node.name_kind = NameKind::kTemp;
        break;
    }
    return make(std::move(node));
  }

  // Arguments of a call whose '(' is next; the closing ')' is consumed.
  std::vector<ExprPtr> parse_args() {
    expect(TokenKind::kLParen, "'('");
    std::vector<ExprPtr> args;
    if (peek().kind == TokenKind::kRParen) {
      next();
      return args;
    }
    args.push_back(parse_expr());
    while (accept(TokenKind::kComma)) {
      if (args.size() >= 8) fail(context_, peek().pos, "too many arguments (at most 8)");
      args.push_back(parse_expr());
    }
    expect(TokenKind::kRParen, "',' or ')' in the argument list");
    return args;
  }

  void check_arity(const Token& name, std::size_t got, std::size_t want) {
    if (got != want) {
      fail(context_, name.pos,
           detail::cat("wrong number of arguments: '", name.text, "' takes ", want,
                       want == 1 ? " argument" : " arguments", ", got ", got));
    }
  }

  ExprPtr parse_call(const Token& name) {
    Nesting guard(*this, name.pos);
    Expr node;
    node.pos = name.pos;
    if (name.text == "spike") return parse_spike(name);
    if (find_surrogate(name.text)) {
      fail(context_, name.pos,
           detail::cat("surrogate '", name.text,
                       "' can only appear as spike's second argument, as in spike(z, ", name.text,
                       ")"));
    }
    std::optional<ir::Op> function = find_function(name.text);
    if (name.text == "detach") {
      node.kind = ExprKind::kDetach;
      node.args = parse_args();
      check_arity(name, node.args.size(), 1);
      return make(std::move(node));
    }
    if (!function) {
      fail(context_, name.pos,
           detail::cat("unsupported function '", name.text,
                       "'; supported: ", supported_functions()));
    }
    node.kind = ExprKind::kCall;
    node.function = *function;
    node.args = parse_args();
    check_arity(name, node.args.size(), static_cast<std::size_t>(ir::op_info(*function).arity));
    return make(std::move(node));
  }

  ExprPtr parse_spike(const Token& name) {
    Expr node;
    node.kind = ExprKind::kSpike;
    node.pos = name.pos;
    expect(TokenKind::kLParen, "'('");
    node.args.push_back(parse_expr());
    node.surrogate = Surrogate::kSigmoid;
    node.alpha = default_alpha(Surrogate::kSigmoid);
    if (accept(TokenKind::kComma)) {
      const Token& s = peek();
      std::optional<Surrogate> surrogate;
      if (s.kind == TokenKind::kIdent) surrogate = find_surrogate(s.text);
      if (!surrogate) {
        fail(context_, s.pos,
             detail::cat("expected a surrogate as spike's second argument (",
                         supported_surrogates(), "), found ", describe(s)));
      }
      next();
      node.surrogate = *surrogate;
      node.alpha = default_alpha(*surrogate);
      if (accept(TokenKind::kLParen)) {
        double sign = 1.0;
        SourcePos alpha_pos = peek().pos;
        if (accept(TokenKind::kMinus)) {
          sign = -1.0;
        } else {
          accept(TokenKind::kPlus);
        }
        node.alpha = sign * expect(TokenKind::kNumber, "a number (the surrogate's alpha)").number;
        if (!(node.alpha > 0.0))
          fail(context_, alpha_pos, detail::cat("a surrogate's alpha must be positive"));
        expect(TokenKind::kRParen, "')' after the surrogate's alpha");
      }
    }
    if (peek().kind == TokenKind::kComma) {
      fail(context_, name.pos, "wrong number of arguments: 'spike' takes 1 or 2 arguments");
    }
    expect(TokenKind::kRParen, "')' after spike's arguments");
    return make(std::move(node));
  }

  ErrorContext context_;
  std::vector<Token> tokens_;
  std::string lex_error_;
  std::size_t at_ = 0;
  int nesting_ = 0;
  NeuronSpec spec_;
  std::map<std::string, NameInfo, std::less<>> names_;
};

}  // namespace

}  // namespace flexkit::snn

namespace flexkit {

snn::NeuronSpec parse_neuron(std::string_view text, std::string_view origin) {
  return snn::Parser(text, origin).parse();
}

snn::NeuronSpec with_parameter(snn::NeuronSpec spec, std::string_view name, double value) {
  std::string available;
  for (snn::Param& param : spec.params) {
    if (param.name == name) {
      if (!std::isfinite(value)) {
        throw NeuronError(detail::cat("neuron ", spec.name, ": parameter '", name,
                                      "' must be finite, got ", value),
                          0, 0);
      }
      param.default_value = value;
      return spec;
    }
    available += detail::cat(available.empty() ? "" : ", ", param.name);
  }
  throw NeuronError(
      detail::cat("neuron ", spec.name, ": no parameter '", name,
                  "'; its parameters are: ", available.empty() ? "(none)" : available),
      0, 0);
}

}  // namespace flexkit
