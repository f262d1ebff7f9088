// jinja2's tests (tests.py) and the argument helpers the builtins share.
#include <functional>
#include <map>

#include "jinja_ast.h"
#include "jinja_builtins.h"

namespace lft::data::jinja {

const Value* argument(const CallArgs& args, std::size_t index, const char* name) {
  if (index < args.positional.size()) return &args.positional[index];
  return name ? args.find(name) : nullptr;
}

void check_arity(const CallArgs& args, std::size_t max_positional, const char* what) {
  if (args.positional.size() > max_positional) {
    fail(ErrorKind::kType, std::string(what) + "() takes at most " +
                               std::to_string(max_positional) + " arguments (" +
                               std::to_string(args.positional.size()) + " given)");
  }
}

namespace {

using TestFn = std::function<bool(const Value&, const CallArgs&)>;

const Value& arg0(const CallArgs& a, const char* test) {
  const Value* v = argument(a, 0, nullptr);
  if (!v) fail(ErrorKind::kType, std::string("test '") + test + "' needs an argument");
  return *v;
}

std::int64_t integer_of(const Value& v) {
  if (v.is_undefined()) v.fail_undefined();
  if (!v.is_int() && !v.is_bool())
    fail(ErrorKind::kType, "expected an integer, got " + v.type_name());
  return v.as_int();
}

const std::map<std::string, TestFn>& tests() {
  static const std::map<std::string, TestFn> table = [] {
    std::map<std::string, TestFn> t;
    t["defined"] = [](const Value& v, const CallArgs&) { return !v.is_undefined(); };
    t["undefined"] = [](const Value& v, const CallArgs&) { return v.is_undefined(); };
    t["none"] = [](const Value& v, const CallArgs&) { return v.is_none(); };
    t["string"] = [](const Value& v, const CallArgs&) { return v.is_string(); };
    t["number"] = [](const Value& v, const CallArgs&) { return v.is_number(); };
    t["integer"] = [](const Value& v, const CallArgs&) { return v.is_int(); };
    t["float"] = [](const Value& v, const CallArgs&) { return v.is_float(); };
    t["boolean"] = [](const Value& v, const CallArgs&) { return v.is_bool(); };
    t["true"] = [](const Value& v, const CallArgs&) { return v.is_bool() && v.as_bool(); };
    t["false"] = [](const Value& v, const CallArgs&) { return v.is_bool() && !v.as_bool(); };
    t["mapping"] = [](const Value& v, const CallArgs&) { return v.is_dict(); };
    t["iterable"] = [](const Value& v, const CallArgs&) {
      return v.is_undefined() || v.is_string() || v.is_sequence_like() || v.is_dict() ||
             v.is_iterator();
    };
    t["sequence"] = [](const Value& v, const CallArgs&) {
      return v.is_undefined() || v.is_string() || v.is_sequence_like() || v.is_dict();
    };
    t["callable"] = [](const Value& v, const CallArgs&) { return v.is_callable(); };
    t["odd"] = [](const Value& v, const CallArgs&) {
      const auto i = integer_of(v);
      return ((i % 2) + 2) % 2 == 1;
    };
    t["even"] = [](const Value& v, const CallArgs&) { return integer_of(v) % 2 == 0; };
    t["divisibleby"] = [](const Value& v, const CallArgs& a) {
      const auto d = integer_of(arg0(a, "divisibleby"));
      if (d == 0) fail(ErrorKind::kZeroDivision, "integer modulo by zero");
      return integer_of(v) % d == 0;
    };
    const TestFn eq = [](const Value& v, const CallArgs& a) {
      return values_equal(v, arg0(a, "eq"));
    };
    const TestFn ne = [](const Value& v, const CallArgs& a) {
      return !values_equal(v, arg0(a, "ne"));
    };
    t["eq"] = t["equalto"] = t["=="] = eq;
    t["ne"] = t["!="] = ne;
    t["lt"] = t["lessthan"] = t["<"] = [](const Value& v, const CallArgs& a) {
      return compare_values(v, arg0(a, "lt"), "<") < 0;
    };
    t["le"] = t["<="] = [](const Value& v, const CallArgs& a) {
      return compare_values(v, arg0(a, "le"), "<=") <= 0;
    };
    t["gt"] = t["greaterthan"] = t[">"] = [](const Value& v, const CallArgs& a) {
      return compare_values(v, arg0(a, "gt"), ">") > 0;
    };
    t["ge"] = t[">="] = [](const Value& v, const CallArgs& a) {
      return compare_values(v, arg0(a, "ge"), ">=") >= 0;
    };
    t["in"] = [](const Value& v, const CallArgs& a) { return contains(arg0(a, "in"), v); };
    t["sameas"] = [](const Value& v, const CallArgs& a) {
      const Value& o = arg0(a, "sameas");
      if (v.kind() != o.kind()) return false;
      // Python's `is`: identity; equal small strings and numbers are usually the same object.
      if (!v.is_dict() && !v.is_namespace() && !v.is_sequence_like()) return values_equal(v, o);
      if (v.is_dict() || v.is_namespace()) return &v.dict_ref() == &o.dict_ref();
      if (v.is_sequence_like()) return &v.items() == &o.items();
      return false;
    };
    t["lower"] = [](const Value& v, const CallArgs&) {
      return v.to_str() == python_lower(v.to_str());
    };
    t["upper"] = [](const Value& v, const CallArgs&) {
      return v.to_str() == python_upper(v.to_str());
    };
    t["escaped"] = [](const Value&, const CallArgs&) { return false; };
    t["filter"] = [](const Value& v, const CallArgs&) {
      return v.is_string() && has_filter(v.str());
    };
    t["test"] = [](const Value& v, const CallArgs&) { return v.is_string() && has_test(v.str()); };
    return t;
  }();
  return table;
}

}  // namespace

bool has_test(const std::string& name) { return tests().count(name) != 0; }

bool apply_test(const std::string& name, const Value& value, const CallArgs& args) {
  const auto it = tests().find(name);
  if (it == tests().end()) fail(ErrorKind::kRuntime, "No test named '" + name + "'.");
  return it->second(value, args);
}

}  // namespace lft::data::jinja
