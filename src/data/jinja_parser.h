// The parser: recursive descent over the token stream with jinja2's grammar and precedence
// (parser.py):
//   condexpr: or [if or [else condexpr]]     or: and (or and)*     and: not (and not)*
//   not: not not | compare                   compare: math1 ((==|!=|<|<=|>|>=|in|not in) math1)*
//   math1: concat ((+|-) concat)*            concat: math2 (~ math2)*
//   math2: pow ((*|/|//|%) pow)*             pow: unary (** unary)*
//   unary: (-|+) unary | primary postfix*, then filters / tests / calls
// Error messages follow jinja2's wording so a failing template reads the same in both.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "jinja_ast.h"

namespace lft::data::jinja {

// Statements are parsed in jinja_parser.cpp, expressions in jinja_parse_expr.cpp.
class Parser {
  using TK = Token::Kind;

 public:
  Parser(std::vector<Token> tokens, std::string name)
      : t_(std::move(tokens)), name_(std::move(name)) {}
  Body parse_all();

 private:
  const Token& cur() const { return t_[i_]; }
  const Token& peek(std::size_t n = 1) const { return t_[std::min(i_ + n, t_.size() - 1)]; }
  const Token& next() { return t_[i_ < t_.size() - 1 ? i_++ : i_]; }

  [[noreturn]] void fail_at(const std::string& message, int line) const;
  [[noreturn]] void fail_here(const std::string& message) const { fail_at(message, cur().line); }

  static std::string describe(const Token& t);

  bool is_op(const char* op) const { return cur().kind == TK::kOperator && cur().text == op; }
  bool is_name(const char* name) const { return cur().kind == TK::kName && cur().text == name; }
  void expect_op(const char* op);
  std::string expect_name();
  void expect_block_end();

  // Parses until one of `end_tags` opens a block ("{% endfor"); leaves the stream at that name.
  Body parse_body(const std::vector<std::string>& end_tags);
  StmtPtr parse_statement();
  // " Jinja was looking for ... ": jinja2's hint naming the innermost open block.
  std::string looking_for() const;

  // Body up to one of `ends`; consumes "name %}" of the end tag and returns the body.
  Body parse_block_body(const std::string& block, const std::vector<std::string>& ends);
  void finish_end_tag();
  StmtPtr parse_if(StmtPtr s);
  Target parse_target(bool allow_attribute);
  StmtPtr parse_for(StmtPtr s);
  StmtPtr parse_set(StmtPtr s);
  void parse_params(std::vector<MacroParam>& params);
  StmtPtr parse_macro(StmtPtr s);
  StmtPtr parse_call_block(StmtPtr s);
  StmtPtr parse_filter_block(StmtPtr s);
  StmtPtr parse_with(StmtPtr s);
  ExprPtr make(Expr::Kind kind, int line);
  // The value a filter block or set block filters: a name nobody can write.
  ExprPtr placeholder();

  // A tuple without parentheses where jinja2 allows one ("{{ a, b }}", "for x in a, b").
  ExprPtr parse_tuple(bool with_condexpr);
  bool starts_expression() const;
  ExprPtr parse_expression(bool with_condexpr);
  ExprPtr parse_condexpr();
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr binary(const std::string& op, ExprPtr left, ExprPtr right, int line);
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  void parse_call_args(Expr& e);
  ExprPtr parse_call(ExprPtr node);

  // node | f(args) | g ... with `is` tests and calls in between, as jinja2's parse_filter_expr.
  ExprPtr parse_filter_chain(ExprPtr node, bool first_pipe = true, bool allow_tests = false);
  ExprPtr parse_test(ExprPtr node);

  std::vector<Token> t_;
  std::size_t i_ = 0;
  std::string name_;
  std::vector<std::pair<std::string, std::vector<std::string>>>
      block_stack_;  // open blocks, end tags
  int loop_depth_ = 0;
  int argc_ = 0;
};

}  // namespace lft::data::jinja
