// The values a chat template computes with, modelled on the Python objects jinja2 hands around:
// None, bool, int, float, str, list, tuple, dict, jinja2's Undefined, namespace() objects and
// callables (macros, globals, bound methods), and the one-shot iterators that jinja2's map, select,
// selectattr, unique, items, batch and reverse filters return (always true, no len(), no
// subscript, consumed by iteration, unprintable: jinja2 prints their address). Lists, dicts,
// namespaces and iterators are shared, as Python references are, so `ns.x = ...` is seen through
// every name bound to `ns`.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "lft/data/jinja.h"

namespace lft::data::jinja {

class Value;
using List = std::vector<Value>;

// Positional and keyword arguments of a call, in source order.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  const Value* find(const std::string& name) const;
};

using NativeFn = std::function<Value(const CallArgs&)>;

class Value {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kTuple,
    kDict,
    kNamespace,
    kCallable,
    kIterator
  };
  struct Dict {
    std::vector<std::pair<Value, Value>> items;
    const Value* find(const Value& key) const;
    const Value* find(const std::string& key) const;
    void set(const Value& key, Value value);  // insert or replace, keeping the first position
  };
  struct Callable {
    std::string name;  // for messages: "range", "macro 'render_tool'", "method 'strip'"
    NativeFn fn;
  };

  Value() = default;  // Undefined, without a name
  static Value undefined(std::string why, ErrorKind kind = ErrorKind::kUndefined);
  static Value none();
  static Value boolean(bool b);
  static Value integer(std::int64_t i);
  static Value floating(double f);
  static Value string(std::string s);
  // jinja2's Markup (from |safe or |escape): `+` HTML-escapes the plain str it is joined with.
  static Value markup(std::string s);
  static Value list(List items);
  static Value tuple(List items);
  static Value dict(Dict d = {});
  static Value namespace_(Dict attrs = {});
  static Value callable(std::string name, NativeFn fn);
  // A Python generator ("generator") or list_reverseiterator over `items`.
  static Value iterator(List items, const char* type_name = "generator");
  static Value from_json(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }  // Python: bool is an int
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_markup() const { return kind_ == Kind::kString && markup_; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kTuple; }
  bool is_sequence_like() const { return is_list() || is_tuple(); }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }
  bool is_iterator() const { return kind_ == Kind::kIterator; }

  bool as_bool() const { return b_; }
  std::int64_t as_int() const { return is_bool() ? (b_ ? 1 : 0) : i_; }
  double as_double() const { return is_float() ? f_ : static_cast<double>(as_int()); }
  const std::string& str() const { return *s_; }   // string; for Undefined: why it is undefined
  const List& items() const { return *list_; }     // list or tuple
  const Dict& dict_ref() const { return *dict_; }  // dict or namespace
  Dict& namespace_mut() const { return *dict_; }
  const Callable& callable_ref() const { return *callable_; }
  ErrorKind undefined_kind() const { return undefined_kind_; }

  // Python truth value; Undefined is false.
  bool truthy() const;
  // Python type name as errors print it: 'str', 'int', 'dict', 'NoneType', ...
  std::string type_name() const;
  // str(value) as {{ }} prints it; Undefined prints "", as jinja2's default Undefined does.
  std::string to_str() const;
  // repr(value): strings quoted as Python quotes them.
  std::string repr() const;
  // Items of a for loop: list/tuple items, dict keys, string characters; Undefined is empty; an
  // iterator's remaining items (it is then exhausted). Throws kType for what Python cannot iterate.
  List iterate() const;
  // next(iter(value)): the first item, consuming only it from an iterator; false when empty.
  bool first_item(Value* out) const;
  // len(value); throws kType for what has no length.
  std::int64_t length() const;

  // Throws the UndefinedError (or SecurityError) this Undefined stands for.
  [[noreturn]] void fail_undefined() const;

 private:
  Kind kind_ = Kind::kUndefined;
  ErrorKind undefined_kind_ = ErrorKind::kUndefined;
  bool b_ = false;
  bool markup_ = false;
  std::int64_t i_ = 0;
  double f_ = 0.0;
  std::shared_ptr<const std::string> s_;
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<const Callable> callable_;
  std::shared_ptr<std::size_t> cursor_;  // iterator: items consumed so far
  const char* iterator_type_ = "generator";
};

// Python ==, and the order of <, <= ... (throws kType where Python raises TypeError).
bool values_equal(const Value& a, const Value& b);
int compare_values(const Value& a, const Value& b, const char* op);

// Python's float repr: shortest string that reads back, "1.0", "1e-05", "inf".
std::string python_float_repr(double d);

// json.dumps(value, ensure_ascii, indent, separators, sort_keys) as transformers' tojson calls it.
// indent < 0: none; indent_text is used when indent was given as a string.
struct JsonOptions {
  bool ensure_ascii = false;
  bool has_indent = false;
  std::string indent_text;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
std::string to_python_json(const Value& value, const JsonOptions& options);

// markupsafe.escape: & < > " ' as HTML entities.
std::string html_escape(const std::string& s);

// UTF-8 helpers: Python counts and slices strings by code point.
std::vector<std::uint32_t> utf8_decode(const std::string& s);
std::string utf8_encode(const std::vector<std::uint32_t>& cps);
void utf8_append(std::string& out, std::uint32_t cp);
std::int64_t utf8_length(const std::string& s);
bool is_python_space(std::uint32_t cp);  // str.isspace()
bool is_ascii(const std::string& s);

// Throws Error(kind, message) without a line; the evaluator adds the line it was running.
[[noreturn]] void fail(ErrorKind kind, const std::string& message);

}  // namespace lft::data::jinja
