// Expression evaluation. Undefined values travel until something uses them, as jinja2's default
// Undefined does: printing gives "", iterating gives nothing, tests and `default` see them, and
// attribute access, calls and arithmetic raise UndefinedError.
#include "jinja_builtins.h"
#include "jinja_eval.h"

namespace lft::data::jinja {

Value Renderer::eval(const Expr& e) {
  try {
    return eval_inner(e);
  } catch (const Error& err) {
    rethrow_with_line(err, e.line);
  }
}

CallArgs Renderer::eval_args(const Expr& e, std::size_t first) {
  CallArgs args;
  for (std::size_t i = first; i < e.args.size(); ++i) args.positional.push_back(eval(*e.args[i]));
  for (const auto& kv : e.kwargs) args.keyword.emplace_back(kv.first, eval(*kv.second));
  return args;
}

Value Renderer::eval_compare(const Expr& e) {
  Value left = eval(*e.args[0]);
  for (std::size_t i = 0; i < e.ops.size(); ++i) {
    Value right = eval(*e.args[i + 1]);
    const std::string& op = e.ops[i];
    bool ok;
    if (op == "==")
      ok = values_equal(left, right);
    else if (op == "!=")
      ok = !values_equal(left, right);
    else if (op == "in")
      ok = contains(right, left);
    else if (op == "not in")
      ok = !contains(right, left);
    else {
      const int c = compare_values(left, right, op.c_str());
      ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
    }
    if (!ok) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Value Renderer::eval_inner(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kConst:
      return e.value;
    case Expr::Kind::kName: {
      const Value* v = scope_->lookup(e.name);
      return v ? *v : Value::undefined("'" + e.name + "' is undefined");
    }
    case Expr::Kind::kGetAttr:
      return get_attribute(eval(*e.args[0]), e.name);
    case Expr::Kind::kGetItem:
      return get_item(eval(*e.args[0]), eval(*e.args[1]));
    case Expr::Kind::kSlice: {
      const Value obj = eval(*e.args[0]);
      Value parts[3];
      const Value* ptrs[3] = {nullptr, nullptr, nullptr};
      for (int i = 0; i < 3; ++i) {
        if (e.args[static_cast<std::size_t>(i) + 1]) {
          parts[i] = eval(*e.args[static_cast<std::size_t>(i) + 1]);
          ptrs[i] = &parts[i];
        }
      }
      return get_slice(obj, ptrs[0], ptrs[1], ptrs[2]);
    }
    case Expr::Kind::kCall: {
      const Value callee = eval(*e.args[0]);
      return call_value(callee, eval_args(e, 1));
    }
    case Expr::Kind::kFilter: {
      const Value v = eval(*e.args[0]);
      return apply_filter(e.name, v, eval_args(e, 1));
    }
    case Expr::Kind::kTest: {
      const Value v = eval(*e.args[0]);
      const bool r = apply_test(e.name, v, eval_args(e, 1));
      return Value::boolean(e.negated ? !r : r);
    }
    case Expr::Kind::kNeg:
      return negate(eval(*e.args[0]));
    case Expr::Kind::kPos: {
      Value v = eval(*e.args[0]);
      if (v.is_undefined()) v.fail_undefined();
      if (!v.is_number())
        fail(ErrorKind::kType, "bad operand type for unary +: '" + v.type_name() + "'");
      return v.is_bool() ? Value::integer(v.as_int()) : v;
    }
    case Expr::Kind::kNot:
      return Value::boolean(!eval(*e.args[0]).truthy());
    case Expr::Kind::kBinary:
      return binary_op(e.name, eval(*e.args[0]), eval(*e.args[1]));
    case Expr::Kind::kAnd: {
      Value left = eval(*e.args[0]);
      return left.truthy() ? eval(*e.args[1]) : left;
    }
    case Expr::Kind::kOr: {
      Value left = eval(*e.args[0]);
      return left.truthy() ? left : eval(*e.args[1]);
    }
    case Expr::Kind::kCompare:
      return eval_compare(e);
    case Expr::Kind::kCondition:
      if (eval(*e.args[0]).truthy()) return eval(*e.args[1]);
      if (e.args[2]) return eval(*e.args[2]);
      return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      List items;
      items.reserve(e.args.size());
      for (const auto& a : e.args) items.push_back(eval(*a));
      return e.kind == Expr::Kind::kList ? Value::list(std::move(items))
                                         : Value::tuple(std::move(items));
    }
    case Expr::Kind::kDict: {
      Value::Dict d;
      for (std::size_t i = 0; i + 1 < e.args.size(); i += 2)
        d.set(eval(*e.args[i]), eval(*e.args[i + 1]));
      return Value::dict(std::move(d));
    }
  }
  fail(ErrorKind::kRuntime, "unknown expression");
}

}  // namespace lft::data::jinja
