#include "jinja_eval.h"

#include "jinja_builtins.h"

namespace lft::data::jinja {

const Value* Scope::lookup(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent.get()) {
    for (const auto& kv : s->vars) {
      if (kv.first == name) return &kv.second;
    }
  }
  return nullptr;
}

void Scope::set(const std::string& name, Value value) {
  for (auto& kv : vars) {
    if (kv.first == name) {
      kv.second = std::move(value);
      return;
    }
  }
  vars.emplace_back(name, std::move(value));
}

Renderer::Renderer(const Program& program, std::shared_ptr<Scope> globals, std::vector<Span>* spans,
                   SpanUnit unit)
    : program_(program), scope_(std::make_shared<Scope>()), spans_(spans), unit_(unit) {
  scope_->parent = std::move(globals);
}

std::string Renderer::run() {
  exec_body(program_.body);
  return std::move(top_);
}

void Renderer::rethrow_with_line(const Error& err, int line) const {
  if (err.line() != 0 || err.kind() == ErrorKind::kRaised) throw err;
  throw Error(err.kind(), err.message(), program_.name, line);
}

// ---- statements --------------------------------------------------------------------------------

Renderer::Flow Renderer::exec_body(const Body& body) {
  for (const auto& s : body) {
    const Flow f = exec(*s);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Renderer::Flow Renderer::exec(const Stmt& s) {
  try {
    switch (s.kind) {
      case Stmt::Kind::kText:
        out_->append(s.text);
        return Flow::kNormal;
      case Stmt::Kind::kOutput:
        out_->append(eval(*s.expr).to_str());
        return Flow::kNormal;
      case Stmt::Kind::kIf:
        for (const auto& branch : s.branches) {
          if (!branch.first || eval(*branch.first).truthy()) return exec_body(branch.second);
        }
        return Flow::kNormal;
      case Stmt::Kind::kFor:
        return exec_for(s);
      case Stmt::Kind::kSet:
        assign(s.target, eval(*s.expr));
        return Flow::kNormal;
      case Stmt::Kind::kSetBlock: {
        Value text = Value::string(capture(s.body, scope_));
        if (s.expr) {
          auto inner = std::make_shared<Scope>();
          inner->parent = scope_;
          inner->set(" captured", text);
          std::swap(scope_, inner);
          text = eval(*s.expr);
          std::swap(scope_, inner);
        }
        assign(s.target, text);
        return Flow::kNormal;
      }
      case Stmt::Kind::kMacro:
        scope_->set(s.target.names[0], define_macro(s));
        return Flow::kNormal;
      case Stmt::Kind::kCallBlock: {
        // caller() renders the block body in its own scope, with the call block's parameters.
        const Stmt* def = &s;
        auto closure = scope_;
        Value caller = Value::callable("macro 'caller'", [this, def, closure](const CallArgs& a) {
          return call_macro(*def, closure, a);
        });
        const Expr& call = *s.expr;
        Value callee = eval(*call.args[0]);
        CallArgs args = eval_args(call, 1);
        args.keyword.emplace_back("caller", caller);
        out_->append(call_value(callee, args).to_str());
        return Flow::kNormal;
      }
      case Stmt::Kind::kFilterBlock: {
        auto inner = std::make_shared<Scope>();
        inner->parent = scope_;
        inner->set(" captured", Value::string(capture(s.body, scope_)));
        std::swap(scope_, inner);
        const Value v = eval(*s.expr);
        std::swap(scope_, inner);
        out_->append(v.to_str());
        return Flow::kNormal;
      }
      case Stmt::Kind::kBreak:
        return Flow::kBreak;
      case Stmt::Kind::kContinue:
        return Flow::kContinue;
      case Stmt::Kind::kGeneration:
        exec_generation(s);
        return Flow::kNormal;
      case Stmt::Kind::kWith: {
        auto inner = std::make_shared<Scope>();
        inner->parent = scope_;
        for (const auto& a : s.assignments) {
          const Value v = eval(*a.second);  // evaluated in the outer scope, as jinja2 does
          std::swap(scope_, inner);
          assign(a.first, v);
          std::swap(scope_, inner);
        }
        std::swap(scope_, inner);
        const Flow f = exec_body(s.body);
        std::swap(scope_, inner);
        return f;
      }
    }
  } catch (const Error& err) {
    rethrow_with_line(err, s.line);
  }
  return Flow::kNormal;
}

void Renderer::exec_generation(const Stmt& s) {
  // transformers' AssistantTracker: the span starts at the length of everything the template
  // has yielded so far (top_, whatever capture we are in) and is as long as the block's text.
  auto inner = std::make_shared<Scope>();
  inner->parent = scope_;
  const std::string text = capture(s.body, inner);
  if (spans_) {
    const bool bytes = unit_ == SpanUnit::kBytes;
    const std::size_t begin = bytes ? top_.size() : static_cast<std::size_t>(utf8_length(top_));
    spans_->emplace_back(
        begin, begin + (bytes ? text.size() : static_cast<std::size_t>(utf8_length(text))));
  }
  out_->append(text);
}

Renderer::Flow Renderer::exec_for(const Stmt& s) {
  const Value iterable = eval(*s.expr);
  if (iterable.is_callable() || iterable.is_namespace() || iterable.is_none() ||
      iterable.is_number()) {
    fail(ErrorKind::kType, "'" + iterable.type_name() + "' object is not iterable");
  }
  List items = iterable.iterate();
  auto outer = scope_;
  if (s.filter) {
    List kept;
    for (const auto& item : items) {
      scope_ = std::make_shared<Scope>();
      scope_->parent = outer;
      assign(s.target, item);
      if (eval(*s.filter).truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  const auto n = static_cast<std::int64_t>(items.size());
  const Value length = Value::integer(n);
  for (std::int64_t i = 0; i < n; ++i) {
    scope_ = std::make_shared<Scope>();
    scope_->parent = outer;
    Value::Dict loop;
    loop.items.reserve(12);
    const auto add = [&](const char* key, Value v) {
      loop.items.emplace_back(Value::string(key), std::move(v));
    };
    add("index", Value::integer(i + 1));
    add("index0", Value::integer(i));
    add("revindex", Value::integer(n - i));
    add("revindex0", Value::integer(n - i - 1));
    add("first", Value::boolean(i == 0));
    add("last", Value::boolean(i == n - 1));
    add("length", length);
    add("depth", Value::integer(1));
    add("depth0", Value::integer(0));
    if (i > 0) add("previtem", items[static_cast<std::size_t>(i - 1)]);
    if (i + 1 < n) add("nextitem", items[static_cast<std::size_t>(i + 1)]);
    const std::size_t index = static_cast<std::size_t>(i);
    add("cycle", Value::callable("loop.cycle", [index](const CallArgs& a) {
          if (a.positional.empty()) fail(ErrorKind::kType, "no items for cycling given");
          return a.positional[index % a.positional.size()];
        }));
    scope_->set("loop", Value::dict(std::move(loop)));
    assign(s.target, items[static_cast<std::size_t>(i)]);
    const Flow f = exec_body(s.body);
    if (f == Flow::kBreak) break;
  }
  scope_ = outer;
  if (n == 0 && !s.else_body.empty()) return exec_body(s.else_body);
  return Flow::kNormal;
}

void Renderer::assign(const Target& target, const Value& value) {
  if (!target.attribute.empty()) {
    const Value* ns = scope_->lookup(target.names[0]);
    if (!ns || !ns->is_namespace()) {
      fail(ErrorKind::kRuntime, "cannot assign attribute on non-namespace object");
    }
    if (!target.attribute.empty() && target.attribute[0] == '_') {
      fail(ErrorKind::kSecurity,
           "Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" +
               target.attribute + "'. Please rename the attribute.");
    }
    ns->namespace_mut().set(Value::string(target.attribute), value);
    return;
  }
  if (!target.unpack) {
    scope_->set(target.names[0], value);
    return;
  }
  if (!value.is_string() && !value.is_sequence_like() && !value.is_dict() &&
      !value.is_undefined() && !value.is_iterator()) {
    fail(ErrorKind::kType, "cannot unpack non-iterable " + value.type_name() + " object");
  }
  const List parts = value.iterate();
  if (parts.size() != target.names.size()) {
    if (parts.size() > target.names.size()) {
      fail(ErrorKind::kValue,
           "too many values to unpack (expected " + std::to_string(target.names.size()) + ")");
    }
    fail(ErrorKind::kValue, "not enough values to unpack (expected " +
                                std::to_string(target.names.size()) + ", got " +
                                std::to_string(parts.size()) + ")");
  }
  for (std::size_t i = 0; i < parts.size(); ++i) scope_->set(target.names[i], parts[i]);
}

Value Renderer::define_macro(const Stmt& s) {
  const Stmt* def = &s;
  auto closure = scope_;
  return Value::callable(
      "macro '" + s.target.names[0] + "'",
      [this, def, closure](const CallArgs& a) { return call_macro(*def, closure, a); });
}

Value Renderer::call_macro(const Stmt& def, const std::shared_ptr<Scope>& closure,
                           const CallArgs& args) {
  auto scope = std::make_shared<Scope>();
  scope->parent = closure;
  const std::string name = def.kind == Stmt::Kind::kMacro ? def.target.names[0] : "caller";
  if (args.positional.size() > def.params.size()) {
    fail(ErrorKind::kType, "macro '" + name + "' takes not more than " +
                               std::to_string(def.params.size()) + " argument(s)");
  }
  std::vector<bool> bound(def.params.size(), false);
  for (std::size_t i = 0; i < args.positional.size(); ++i) {
    scope->set(def.params[i].name, args.positional[i]);
    bound[i] = true;
  }
  for (const auto& kv : args.keyword) {
    if (kv.first == "caller") {
      scope->set("caller", kv.second);
      continue;
    }
    std::size_t i = 0;
    while (i < def.params.size() && def.params[i].name != kv.first) ++i;
    if (i == def.params.size()) {
      fail(ErrorKind::kType, "macro '" + name + "' takes no keyword argument '" + kv.first + "'");
    }
    if (bound[i])
      fail(ErrorKind::kType,
           "macro '" + name + "' got multiple values for argument '" + kv.first + "'");
    scope->set(kv.first, kv.second);
    bound[i] = true;
  }
  // Defaults are evaluated in the macro's scope, so they can see the earlier parameters.
  for (std::size_t i = 0; i < def.params.size(); ++i) {
    if (bound[i]) continue;
    const auto& p = def.params[i];
    if (p.default_value) {
      std::swap(scope_, scope);
      Value v = eval(*p.default_value);
      std::swap(scope_, scope);
      scope->set(p.name, std::move(v));
    } else {
      scope->set(p.name, Value::undefined("parameter '" + p.name + "' was not provided"));
    }
  }
  return Value::string(capture(def.body, scope));
}

std::string Renderer::capture(const Body& body, std::shared_ptr<Scope> scope) {
  std::string buffer;
  std::string* saved_out = out_;
  std::swap(scope_, scope);
  out_ = &buffer;
  try {
    exec_body(body);
  } catch (...) {
    out_ = saved_out;
    std::swap(scope_, scope);
    throw;
  }
  out_ = saved_out;
  std::swap(scope_, scope);
  return buffer;
}

}  // namespace lft::data::jinja
