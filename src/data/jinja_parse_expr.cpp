// Expressions, with jinja2's precedence (see jinja_parser.h).
#include "jinja_parser.h"

namespace lft::data::jinja {

using TK = Token::Kind;

ExprPtr Parser::make(Expr::Kind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

ExprPtr Parser::placeholder() {
  auto e = make(Expr::Kind::kName, cur().line);
  e->name = " captured";
  return e;
}

ExprPtr Parser::parse_tuple(bool with_condexpr) {
  const int line = cur().line;
  ExprPtr first = parse_expression(with_condexpr);
  if (!is_op(",")) return first;
  auto t = make(Expr::Kind::kTuple, line);
  t->args.push_back(std::move(first));
  while (is_op(",")) {
    next();
    if (!starts_expression()) break;
    t->args.push_back(parse_expression(with_condexpr));
  }
  return t;
}

bool Parser::starts_expression() const {
  const Token& t = cur();
  if (t.kind == TK::kName || t.kind == TK::kString || t.kind == TK::kInteger ||
      t.kind == TK::kFloat) {
    return true;
  }
  return t.kind == TK::kOperator &&
         (t.text == "(" || t.text == "[" || t.text == "{" || t.text == "-" || t.text == "+");
}

ExprPtr Parser::parse_expression(bool with_condexpr) {
  return with_condexpr ? parse_condexpr() : parse_or();
}

ExprPtr Parser::parse_condexpr() {
  const int line = cur().line;
  ExprPtr expr = parse_or();
  while (is_name("if")) {
    next();
    auto c = make(Expr::Kind::kCondition, line);
    c->args.push_back(parse_or());  // condition
    c->args.insert(c->args.begin() + 1, std::move(expr));
    if (is_name("else")) {
      next();
      c->args.push_back(parse_condexpr());
    } else {
      c->args.push_back(nullptr);
    }
    // args: condition, then-value, else-value
    expr = std::move(c);
  }
  return expr;
}

ExprPtr Parser::parse_or() {
  ExprPtr left = parse_and();
  while (is_name("or")) {
    auto e = make(Expr::Kind::kOr, next().line);
    e->args.push_back(std::move(left));
    e->args.push_back(parse_and());
    left = std::move(e);
  }
  return left;
}

ExprPtr Parser::parse_and() {
  ExprPtr left = parse_not();
  while (is_name("and")) {
    auto e = make(Expr::Kind::kAnd, next().line);
    e->args.push_back(std::move(left));
    e->args.push_back(parse_not());
    left = std::move(e);
  }
  return left;
}

ExprPtr Parser::parse_not() {
  if (is_name("not")) {
    auto e = make(Expr::Kind::kNot, next().line);
    e->args.push_back(parse_not());
    return e;
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  const int line = cur().line;
  ExprPtr first = parse_math1();
  ExprPtr cmp;
  while (true) {
    std::string op;
    if (cur().kind == TK::kOperator &&
        (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
         cur().text == ">" || cur().text == ">=")) {
      op = next().text;
    } else if (is_name("in")) {
      next();
      op = "in";
    } else if (is_name("not") && peek().kind == TK::kName && peek().text == "in") {
      next();
      next();
      op = "not in";
    } else {
      break;
    }
    if (!cmp) {
      cmp = make(Expr::Kind::kCompare, line);
      cmp->args.push_back(std::move(first));
    }
    cmp->ops.push_back(op);
    cmp->args.push_back(parse_math1());
  }
  return cmp ? std::move(cmp) : std::move(first);
}

ExprPtr Parser::binary(const std::string& op, ExprPtr left, ExprPtr right, int line) {
  auto e = make(Expr::Kind::kBinary, line);
  e->name = op;
  e->args.push_back(std::move(left));
  e->args.push_back(std::move(right));
  return e;
}

ExprPtr Parser::parse_math1() {
  ExprPtr left = parse_concat();
  while (is_op("+") || is_op("-")) {
    const Token& op = next();
    left = binary(op.text, std::move(left), parse_concat(), op.line);
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  ExprPtr left = parse_math2();
  while (is_op("~")) {
    const int line = next().line;
    left = binary("~", std::move(left), parse_math2(), line);
  }
  return left;
}

ExprPtr Parser::parse_math2() {
  ExprPtr left = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const Token& op = next();
    left = binary(op.text, std::move(left), parse_pow(), op.line);
  }
  return left;
}

ExprPtr Parser::parse_pow() {
  ExprPtr left = parse_unary(true);
  while (is_op("**")) {
    const int line = next().line;
    left = binary("**", std::move(left), parse_unary(true), line);
  }
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  ExprPtr node;
  if (is_op("-") || is_op("+")) {
    const Token& op = next();
    node = make(op.text == "-" ? Expr::Kind::kNeg : Expr::Kind::kPos, op.line);
    node->args.push_back(parse_unary(false));
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  if (with_filter) node = parse_filter_chain(std::move(node), true, true);
  return node;
}

ExprPtr Parser::parse_primary() {
  const Token& t = cur();
  const int line = t.line;
  if (t.kind == TK::kName) {
    next();
    auto e = make(Expr::Kind::kConst, line);
    if (t.text == "true" || t.text == "True")
      e->value = Value::boolean(true);
    else if (t.text == "false" || t.text == "False")
      e->value = Value::boolean(false);
    else if (t.text == "none" || t.text == "None")
      e->value = Value::none();
    else {
      e->kind = Expr::Kind::kName;
      e->name = t.text;
    }
    return e;
  }
  if (t.kind == TK::kString) {
    std::string s;
    while (cur().kind == TK::kString) s += next().text;  // adjacent literals concatenate
    auto e = make(Expr::Kind::kConst, line);
    e->value = Value::string(std::move(s));
    return e;
  }
  if (t.kind == TK::kInteger || t.kind == TK::kFloat) {
    next();
    auto e = make(Expr::Kind::kConst, line);
    e->value = t.kind == TK::kInteger ? Value::integer(t.integer) : Value::floating(t.floating);
    return e;
  }
  if (is_op("(")) {
    next();
    if (is_op(")")) {
      next();
      return make(Expr::Kind::kTuple, line);
    }
    ExprPtr inner = parse_tuple(true);
    if (is_op(",")) next();
    expect_op(")");
    return inner;
  }
  if (is_op("[")) {
    next();
    auto e = make(Expr::Kind::kList, line);
    while (!is_op("]")) {
      if (!e->args.empty()) expect_op(",");
      if (is_op("]")) break;
      e->args.push_back(parse_expression(true));
    }
    next();
    return e;
  }
  if (is_op("{")) {
    next();
    auto e = make(Expr::Kind::kDict, line);
    while (!is_op("}")) {
      if (!e->args.empty()) expect_op(",");
      if (is_op("}")) break;
      e->args.push_back(parse_expression(true));
      expect_op(":");
      e->args.push_back(parse_expression(true));
    }
    next();
    return e;
  }
  fail_here("unexpected '" + describe(t) + "'");
}

ExprPtr Parser::parse_postfix(ExprPtr node) {
  while (true) {
    if (is_op(".")) {
      const int line = next().line;
      auto e = make(Expr::Kind::kGetAttr, line);
      if (cur().kind == TK::kInteger) {  // x.0 is x[0]
        e->kind = Expr::Kind::kGetItem;
        auto idx = make(Expr::Kind::kConst, line);
        idx->value = Value::integer(next().integer);
        e->args.push_back(std::move(node));
        e->args.push_back(std::move(idx));
      } else {
        e->name = expect_name();
        e->args.push_back(std::move(node));
      }
      node = std::move(e);
    } else if (is_op("[")) {
      node = parse_subscript(std::move(node));
    } else if (is_op("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr node) {
  const int line = next().line;  // "["
  ExprPtr parts[3];
  bool slice = false;
  int part = 0;
  while (!is_op("]")) {
    if (is_op(":")) {
      next();
      slice = true;
      if (++part > 2) fail_here("expected ']'");
      continue;
    }
    if (parts[part]) fail_here("expected token ']', got '" + describe(cur()) + "'");
    parts[part] = parse_expression(true);
  }
  next();
  auto e = make(slice ? Expr::Kind::kSlice : Expr::Kind::kGetItem, line);
  e->args.push_back(std::move(node));
  if (!slice) {
    if (!parts[0]) fail_at("expected subscript expression", line);
    e->args.push_back(std::move(parts[0]));
  } else {
    for (auto& p : parts) e->args.push_back(std::move(p));
  }
  return e;
}

void Parser::parse_call_args(Expr& e) {
  expect_op("(");
  while (!is_op(")")) {
    if (argc_ > 0) expect_op(",");
    if (is_op(")")) break;
    if (is_op("*"))
      fail_here("*args and **kwargs in calls are not supported by lftrain's Jinja subset");
    if (cur().kind == TK::kName && peek().kind == TK::kOperator && peek().text == "=") {
      std::string key = next().text;
      next();
      e.kwargs.emplace_back(std::move(key), parse_expression(true));
    } else {
      if (!e.kwargs.empty()) fail_here("invalid syntax for function call expression");
      e.args.push_back(parse_expression(true));
    }
    ++argc_;
  }
  next();
}

ExprPtr Parser::parse_call(ExprPtr node) {
  auto e = make(Expr::Kind::kCall, cur().line);
  e->args.push_back(std::move(node));
  const int saved = argc_;
  argc_ = 0;
  parse_call_args(*e);
  argc_ = saved;
  return e;
}

ExprPtr Parser::parse_filter_chain(ExprPtr node, bool first_pipe, bool allow_tests) {
  bool need_pipe = first_pipe;
  while (true) {
    if (!need_pipe || is_op("|")) {
      if (need_pipe) next();
      need_pipe = true;
      const int line = cur().line;
      std::string name = expect_name();
      while (is_op(".")) {
        next();
        name += "." + expect_name();
      }
      if (!has_filter(name)) fail_at("No filter named '" + name + "'.", line);
      auto e = make(Expr::Kind::kFilter, line);
      e->name = name;
      e->args.push_back(std::move(node));
      if (is_op("(")) {
        const int saved = argc_;
        argc_ = 0;
        parse_call_args(*e);
        argc_ = saved;
      }
      node = std::move(e);
    } else if (allow_tests && is_name("is")) {
      node = parse_test(std::move(node));
    } else if (allow_tests && is_op("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_test(ExprPtr node) {
  const int line = next().line;  // "is"
  bool negated = false;
  if (is_name("not")) {
    next();
    negated = true;
  }
  std::string name = expect_name();
  while (is_op(".")) {
    next();
    name += "." + expect_name();
  }
  if (!has_test(name)) fail_at("No test named '" + name + "'.", line);
  auto e = make(Expr::Kind::kTest, line);
  e->name = name;
  e->negated = negated;
  e->args.push_back(std::move(node));
  const Token& t = cur();
  if (is_op("(")) {
    const int saved = argc_;
    argc_ = 0;
    parse_call_args(*e);
    argc_ = saved;
  } else if ((t.kind == TK::kName || t.kind == TK::kString || t.kind == TK::kInteger ||
              t.kind == TK::kFloat || is_op("[") || is_op("{")) &&
             !(is_name("else") || is_name("or") || is_name("and"))) {
    if (is_name("is")) fail_here("You cannot chain multiple tests with is");
    e->args.push_back(parse_postfix(parse_primary()));
  }
  return e;
}

}  // namespace lft::data::jinja
