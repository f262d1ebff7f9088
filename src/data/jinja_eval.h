// The tree walker. Scoping follows jinja2: a for loop gives every iteration a fresh scope (a set
// inside does not survive the iteration, hence namespace()), macros, call blocks and
// {% generation %} bodies get their own scope, if blocks do not.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja_ast.h"

namespace lft::data::jinja {

struct Scope {
  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* lookup(const std::string& name) const;
  void set(const std::string& name, Value value);
};

// The variables every template sees: range, namespace, dict, raise_exception, strftime_now.
void add_globals(Scope& scope);

class Renderer {
 public:
  Renderer(const Program& program, std::shared_ptr<Scope> globals, std::vector<Span>* spans,
           SpanUnit unit);
  std::string run();

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow exec_body(const Body& body);
  Flow exec(const Stmt& s);
  Flow exec_for(const Stmt& s);
  void exec_generation(const Stmt& s);
  void assign(const Target& target, const Value& value);
  Value define_macro(const Stmt& s);
  Value call_macro(const Stmt& def, const std::shared_ptr<Scope>& closure, const CallArgs& args);
  // Renders `body` into a string (macros, set blocks, filter blocks) in `scope`.
  std::string capture(const Body& body, std::shared_ptr<Scope> scope);

  Value eval(const Expr& e);
  Value eval_inner(const Expr& e);
  CallArgs eval_args(const Expr& e, std::size_t first);
  Value eval_compare(const Expr& e);

  [[noreturn]] void rethrow_with_line(const Error& err, int line) const;

  const Program& program_;
  std::shared_ptr<Scope> scope_;
  std::string top_;           // the template's own output: transformers measures spans in it
  std::string* out_ = &top_;  // where text goes now (top_, or a macro's / set block's buffer)
  std::vector<Span>* spans_;
  SpanUnit unit_;
};

}  // namespace lft::data::jinja
