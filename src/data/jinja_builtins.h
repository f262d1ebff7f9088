// What expressions can do to values: jinja2's filters and tests (jinja_filters.cpp,
// jinja_tests.cpp), attribute and item access with the immutable sandbox's rules and the Python
// methods templates call on str, dict and list (jinja_methods.cpp), and the operators
// (jinja_operators.cpp). All throw Error without a line; the evaluator adds it.
#pragma once

#include <string>
#include <vector>

#include "jinja_value.h"

namespace lft::data::jinja {

Value apply_filter(const std::string& name, const Value& value, const CallArgs& args);
bool apply_test(const std::string& name, const Value& value, const CallArgs& args);

// obj.name as the sandbox resolves it: a Python attribute first (str/dict/list methods, namespace
// attributes), else obj["name"]; Undefined (with jinja2's message) when neither exists; an
// Undefined that raises SecurityError for methods that would mutate (list.append, dict.update).
Value get_attribute(const Value& obj, const std::string& name);
// obj[key]: the item first, else (string key) the attribute, else Undefined.
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] for strings, lists and tuples; a null pointer is an omitted part.
Value get_slice(const Value& obj, const Value* start, const Value* stop, const Value* step);

// Binary operators with Python semantics: + - * / // % ** and jinja2's ~.
Value binary_op(const std::string& op, const Value& a, const Value& b);
Value negate(const Value& v);
// `a in b`.
bool contains(const Value& container, const Value& item);
// Calls a callable; throws for Undefined and non-callables as jinja2 does.
Value call_value(const Value& callee, const CallArgs& args);

// Helpers the builtins share.
Value python_str_strip(const std::string& s, const Value* chars, bool left, bool right);
std::string python_title(const std::string& s);      // the title filter
std::string python_str_title(const std::string& s);  // str.title()
std::vector<std::string> python_splitlines(const std::string& s);
std::string python_capitalize(const std::string& s);
std::string python_lower(const std::string& s);
std::string python_upper(const std::string& s);
// Argument `index` (positional) or `name` (keyword), or null when absent.
const Value* argument(const CallArgs& args, std::size_t index, const char* name);
void check_arity(const CallArgs& args, std::size_t max_positional, const char* what);

}  // namespace lft::data::jinja
