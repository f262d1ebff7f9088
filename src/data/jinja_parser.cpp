// Statements: text, {{ }}, and the block tags ({% if %}, {% for %}, {% set %}, {% macro %}, ...).
#include "jinja_parser.h"

#include <algorithm>

namespace lft::data::jinja {

using TK = Token::Kind;

Body Parser::parse_all() {
  Body body = parse_body({});
  if (cur().kind != TK::kEnd) fail_here("unexpected tag");
  return body;
}

void Parser::fail_at(const std::string& message, int line) const {
  throw Error(ErrorKind::kSyntax, message, name_, line);
}

std::string Parser::describe(const Token& t) {
  switch (t.kind) {
    case TK::kEnd:
      return "end of template";
    case TK::kBlockEnd:
      return "end of statement block";
    case TK::kVariableEnd:
      return "end of print statement";
    case TK::kString:
      return "string";
    case TK::kInteger:
      return "integer";
    case TK::kFloat:
      return "float";
    case TK::kData:
      return "template data";
    default:
      return t.text;
  }
}

void Parser::expect_op(const char* op) {
  if (!is_op(op))
    fail_here(std::string("expected token '") + op + "', got '" + describe(cur()) + "'");
  next();
}

std::string Parser::expect_name() {
  if (cur().kind != TK::kName) fail_here("expected token 'name', got '" + describe(cur()) + "'");
  return next().text;
}

void Parser::expect_block_end() {
  if (cur().kind != TK::kBlockEnd) {
    fail_here("expected token 'end of statement block', got '" + describe(cur()) + "'");
  }
  next();
}

Body Parser::parse_body(const std::vector<std::string>& end_tags) {
  Body body;
  while (true) {
    const Token& t = cur();
    if (t.kind == TK::kEnd) {
      if (end_tags.empty()) return body;
      fail_at("Unexpected end of template." + looking_for(), t.line);
    }
    if (t.kind == TK::kData) {
      auto s = std::make_unique<Stmt>();
      s->kind = Stmt::Kind::kText;
      s->line = t.line;
      s->text = t.text;
      body.push_back(std::move(s));
      next();
    } else if (t.kind == TK::kVariableBegin) {
      next();
      auto s = std::make_unique<Stmt>();
      s->kind = Stmt::Kind::kOutput;
      s->line = t.line;
      s->expr = parse_tuple(true);
      if (cur().kind != TK::kVariableEnd) {
        fail_here("expected token 'end of print statement', got '" + describe(cur()) + "'");
      }
      next();
      body.push_back(std::move(s));
    } else if (t.kind == TK::kBlockBegin) {
      const Token& tag = peek();
      if (tag.kind == TK::kName) {
        for (const auto& e : end_tags) {
          if (tag.text == e) {
            next();  // the block begin; the caller consumes the name
            return body;
          }
        }
      }
      next();
      body.push_back(parse_statement());
    } else {
      fail_here("unexpected '" + describe(t) + "'");
    }
  }
}

StmtPtr Parser::parse_statement() {
  const Token& tag = cur();
  if (tag.kind != TK::kName) fail_here("tag name expected");
  const std::string name = tag.text;
  const int line = tag.line;
  auto s = std::make_unique<Stmt>();
  s->line = line;
  next();
  if (name == "if") return parse_if(std::move(s));
  if (name == "for") return parse_for(std::move(s));
  if (name == "set") return parse_set(std::move(s));
  if (name == "macro") return parse_macro(std::move(s));
  if (name == "call") return parse_call_block(std::move(s));
  if (name == "filter") return parse_filter_block(std::move(s));
  if (name == "with") return parse_with(std::move(s));
  if (name == "generation") {
    s->kind = Stmt::Kind::kGeneration;
    expect_block_end();
    s->body = parse_block_body("generation", {"endgeneration"});
    finish_end_tag();
    return s;
  }
  if (name == "break" || name == "continue") {
    if (loop_depth_ == 0) fail_at("'" + name + "' outside of a loop", line);
    s->kind = name == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
    expect_block_end();
    return s;
  }
  static const char* const kRefused[] = {"extends",    "include", "import", "from", "block",
                                         "autoescape", "do",      "trans",  "print"};
  for (const char* r : kRefused) {
    if (name == r) fail_at("tag '" + name + "' is not supported by lftrain's Jinja subset", line);
  }
  fail_at("Encountered unknown tag '" + name + "'." + looking_for(), line);
}

std::string Parser::looking_for() const {
  if (block_stack_.empty()) return "";
  std::string wanted;
  for (const auto& e : block_stack_.back().second)
    wanted += (wanted.empty() ? "'" : " or '") + e + "'";
  return " Jinja was looking for the following tags: " + wanted +
         ". The innermost block that needs to be closed is '" + block_stack_.back().first + "'.";
}

Body Parser::parse_block_body(const std::string& block, const std::vector<std::string>& ends) {
  block_stack_.emplace_back(block, ends);
  Body body = parse_body(ends);
  block_stack_.pop_back();
  return body;
}

void Parser::finish_end_tag() {
  next();  // the end tag's name
  expect_block_end();
}

StmtPtr Parser::parse_if(StmtPtr s) {
  s->kind = Stmt::Kind::kIf;
  ExprPtr cond = parse_tuple(true);
  expect_block_end();
  while (true) {
    Body body = parse_block_body("if", {"elif", "else", "endif"});
    const std::string tag = cur().text;
    next();
    s->branches.emplace_back(std::move(cond), std::move(body));
    if (tag == "elif") {
      cond = parse_tuple(true);
      expect_block_end();
    } else if (tag == "else") {
      expect_block_end();
      s->branches.emplace_back(nullptr, parse_block_body("if", {"endif"}));
      finish_end_tag();
      return s;
    } else {
      expect_block_end();
      return s;
    }
  }
}

Target Parser::parse_target(bool allow_attribute) {
  Target target;
  const bool parens = is_op("(");
  if (parens) next();
  target.names.push_back(expect_name());
  if (allow_attribute && is_op(".")) {
    next();
    target.attribute = expect_name();
    return target;
  }
  while (is_op(",")) {
    next();
    target.unpack = true;
    if (cur().kind != TK::kName) break;
    target.names.push_back(expect_name());
  }
  if (parens) {
    expect_op(")");
    target.unpack = true;
  }
  return target;
}

StmtPtr Parser::parse_for(StmtPtr s) {
  s->kind = Stmt::Kind::kFor;
  s->target = parse_target(false);
  if (!is_name("in")) fail_here("expected token 'in', got '" + describe(cur()) + "'");
  next();
  s->expr = parse_tuple(false);
  if (is_name("if")) {
    next();
    s->filter = parse_tuple(true);
  }
  if (is_name("recursive"))
    fail_here("recursive for loops are not supported by lftrain's Jinja subset");
  expect_block_end();
  ++loop_depth_;
  s->body = parse_block_body("for", {"endfor", "else"});
  --loop_depth_;
  if (cur().text == "else") {
    next();
    expect_block_end();
    s->else_body = parse_block_body("for", {"endfor"});
  }
  finish_end_tag();
  return s;
}

StmtPtr Parser::parse_set(StmtPtr s) {
  s->target = parse_target(true);
  if (is_op("=")) {
    next();
    s->kind = Stmt::Kind::kSet;
    s->expr = parse_tuple(true);
    expect_block_end();
    return s;
  }
  s->kind = Stmt::Kind::kSetBlock;
  if (is_op("|")) s->expr = parse_filter_chain(placeholder());
  expect_block_end();
  s->body = parse_block_body("set", {"endset"});
  finish_end_tag();
  return s;
}

void Parser::parse_params(std::vector<MacroParam>& params) {
  expect_op("(");
  while (!is_op(")")) {
    if (!params.empty()) expect_op(",");
    if (is_op(")")) break;
    MacroParam p;
    p.name = expect_name();
    if (is_op("=")) {
      next();
      p.default_value = parse_expression(true);
    } else if (!params.empty() && params.back().default_value) {
      fail_here("non-default argument follows default argument");
    }
    params.push_back(std::move(p));
  }
  next();
}

StmtPtr Parser::parse_macro(StmtPtr s) {
  s->kind = Stmt::Kind::kMacro;
  s->target.names.push_back(expect_name());
  parse_params(s->params);
  expect_block_end();
  const int saved = loop_depth_;
  loop_depth_ = 0;  // break/continue cannot cross a macro
  s->body = parse_block_body("macro", {"endmacro"});
  loop_depth_ = saved;
  finish_end_tag();
  return s;
}

StmtPtr Parser::parse_call_block(StmtPtr s) {
  s->kind = Stmt::Kind::kCallBlock;
  if (is_op("(")) parse_params(s->params);
  s->expr = parse_expression(true);
  if (s->expr->kind != Expr::Kind::kCall) fail_at("expected call", s->line);
  expect_block_end();
  s->body = parse_block_body("call", {"endcall"});
  finish_end_tag();
  return s;
}

StmtPtr Parser::parse_filter_block(StmtPtr s) {
  s->kind = Stmt::Kind::kFilterBlock;
  s->expr = parse_filter_chain(placeholder(), /*first_pipe=*/false);
  expect_block_end();
  s->body = parse_block_body("filter", {"endfilter"});
  finish_end_tag();
  return s;
}

StmtPtr Parser::parse_with(StmtPtr s) {
  s->kind = Stmt::Kind::kWith;
  while (cur().kind != TK::kBlockEnd) {
    if (!s->assignments.empty()) expect_op(",");
    Target t = parse_target(false);
    expect_op("=");
    s->assignments.emplace_back(std::move(t), parse_expression(true));
  }
  expect_block_end();
  s->body = parse_block_body("with", {"endwith"});
  finish_end_tag();
  return s;
}

std::shared_ptr<const Program> parse_program(const std::string& source, const std::string& name) {
  auto program = std::make_shared<Program>();
  program->name = name;
  program->body = Parser(tokenize(source, name), name).parse_all();
  return program;
}

}  // namespace lft::data::jinja
