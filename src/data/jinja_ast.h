// Tokens and syntax tree of a parsed template. The lexer (jinja_lexer.cpp) applies jinja2's
// whitespace rules (trim_blocks, lstrip_blocks, "-" and "+" markers) so the tree holds the exact
// text to emit; the parser (jinja_parser.cpp) checks filter and test names as jinja2's compiler
// does; the evaluator (jinja_eval.cpp) walks the tree.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja_value.h"

namespace lft::data::jinja {

struct Token {
  enum class Kind {
    kData,
    kVariableBegin,
    kVariableEnd,
    kBlockBegin,
    kBlockEnd,
    kName,
    kString,
    kInteger,
    kFloat,
    kOperator,
    kEnd
  };
  Kind kind;
  std::string text;  // data text, name, operator, or the decoded string literal
  int line;
  std::int64_t integer = 0;
  double floating = 0.0;
};

// Throws Error(kSyntax) for an unterminated tag, comment, string or raw block.
std::vector<Token> tokenize(const std::string& source, const std::string& name);

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kConst,    // value
    kName,     // name
    kGetAttr,  // args[0].name
    kGetItem,  // args[0][args[1]]
    kSlice,    // args[0][args[1]:args[2]:args[3]], a null ExprPtr for an omitted part
    kCall,     // args[0](args[1:], kwargs)
    kFilter,   // args[0] | name(args[1:], kwargs)
    kTest,     // args[0] is [not] name(args[1:], kwargs); negated
    kNeg,      // -args[0]
    kPos,      // +args[0]
    kNot,      // not args[0]
    kBinary,   // args[0] <name> args[1]: + - * / // % ** ~
    kAnd,
    kOr,
    kCompare,    // args[0] ops[0] args[1] ops[1] args[2] ... (Python chaining)
    kCondition,  // args[1] if args[0] else args[2] (args[2] null: no else)
    kList,
    kTuple,
    kDict,  // args: key, value, key, value ...
  };
  Kind kind;
  int line = 0;
  Value value;
  std::string name;
  bool negated = false;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// What a for loop or set binds: one name, a tuple of names, or ns.attr (set only).
struct Target {
  std::vector<std::string> names;  // one name, or several for unpacking
  bool unpack = false;
  std::string attribute;  // for ns.attr: names[0] is ns
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: required
};

struct Stmt {
  enum class Kind {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // branches: (condition, body) pairs; a null condition for else
    kFor,          // for target in expr [if filter]: body [else else_body]
    kSet,          // set target = expr
    kSetBlock,     // set target %} body {% endset, with optional filter chain in expr
    kMacro,        // macro name(params) body
    kCallBlock,    // call(params) expr: body passed as caller()
    kFilterBlock,  // filter name(args) body; expr is the filter applied to a placeholder
    kBreak,
    kContinue,
    kGeneration,  // transformers' AssistantTracker block
    kWith,        // with a = x, b = y: body
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;  // for: the `if` filter of the loop
  Target target;
  Body body;
  Body else_body;
  std::vector<std::pair<ExprPtr, Body>> branches;
  std::vector<MacroParam> params;
  std::vector<std::pair<Target, ExprPtr>> assignments;  // with
};

// The parsed template shared by every copy of a Template.
struct Program {
  std::string name;
  Body body;
};

// Builds the tree; throws Error(kSyntax) naming the line and what was expected.
std::shared_ptr<const Program> parse_program(const std::string& source, const std::string& name);

// True when the filter / test exists (the parser refuses unknown names as jinja2 does).
bool has_filter(const std::string& name);
bool has_test(const std::string& name);

}  // namespace lft::data::jinja
