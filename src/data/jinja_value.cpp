#include "jinja_value.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace lft::data::jinja {

void fail(ErrorKind kind, const std::string& message) { throw Error(kind, message); }

const Value* CallArgs::find(const std::string& name) const {
  for (const auto& kv : keyword) {
    if (kv.first == name) return &kv.second;
  }
  return nullptr;
}

const Value* Value::Dict::find(const Value& key) const {
  for (const auto& kv : items) {
    if (values_equal(kv.first, key)) return &kv.second;
  }
  return nullptr;
}

const Value* Value::Dict::find(const std::string& key) const {
  for (const auto& kv : items) {
    if (kv.first.is_string() && kv.first.str() == key) return &kv.second;
  }
  return nullptr;
}

void Value::Dict::set(const Value& key, Value value) {
  for (auto& kv : items) {
    if (values_equal(kv.first, key)) {
      kv.second = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

Value Value::undefined(std::string why, ErrorKind kind) {
  Value v;
  v.s_ = std::make_shared<const std::string>(std::move(why));
  v.undefined_kind_ = kind;
  return v;
}
Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}
Value Value::integer(std::int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}
Value Value::floating(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = f;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::make_shared<const std::string>(std::move(s));
  return v;
}
Value Value::markup(std::string s) {
  Value v = string(std::move(s));
  v.markup_ = true;
  return v;
}

std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

Value Value::list(List items) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<List>(std::move(items));
  return v;
}
Value Value::tuple(List items) {
  Value v = list(std::move(items));
  v.kind_ = Kind::kTuple;
  return v;
}
Value Value::dict(Dict d) {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<Dict>(std::move(d));
  return v;
}
Value Value::namespace_(Dict attrs) {
  Value v = dict(std::move(attrs));
  v.kind_ = Kind::kNamespace;
  return v;
}
Value Value::callable(std::string name, NativeFn fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.callable_ = std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

Value Value::iterator(List items, const char* type_name) {
  Value v = list(std::move(items));
  v.kind_ = Kind::kIterator;
  v.cursor_ = std::make_shared<std::size_t>(0);
  v.iterator_type_ = type_name;
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return none();
    case nlohmann::ordered_json::value_t::boolean:
      return boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return integer(j.get<std::int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = j.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(INT64_MAX)) fail(ErrorKind::kType, "integer too large");
      return integer(static_cast<std::int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return floating(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e));
      return list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      d.items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) {
        d.items.emplace_back(string(it.key()), from_json(it.value()));
      }
      return dict(std::move(d));
    }
    default:
      fail(ErrorKind::kType, "unsupported JSON value in the context (binary)");
  }
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0.0;
    case Kind::kString:
      return !s_->empty();
    case Kind::kList:
    case Kind::kTuple:
      return !list_->empty();
    case Kind::kDict:
      return !dict_->items.empty();
    default:
      return true;
  }
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return markup_ ? "Markup" : "str";
    case Kind::kList:
      return "list";
    case Kind::kTuple:
      return "tuple";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kCallable:
      return "function";
    case Kind::kIterator:
      return iterator_type_;
  }
  return "object";
}

void Value::fail_undefined() const {
  fail(undefined_kind_, s_ ? *s_ : std::string("value is undefined"));
}

std::string Value::to_str() const {
  switch (kind_) {
    case Kind::kUndefined:
      if (undefined_kind_ == ErrorKind::kSecurity) fail_undefined();
      return "";
    case Kind::kString:
      return *s_;
    case Kind::kCallable:
      fail(ErrorKind::kType, "cannot print " + callable_->name + " (jinja2 would print its repr)");
    case Kind::kIterator:
      fail(ErrorKind::kType, std::string("cannot print a ") + iterator_type_ +
                                 " (jinja2 prints its memory address); add |list");
    default:
      return repr();
  }
}

namespace {

bool is_printable(std::uint32_t cp) {
  if (cp < 0x20 || (cp >= 0x7f && cp <= 0xa0) || cp == 0xad) return false;
  if ((cp >= 0x200b && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202e)) return false;
  if ((cp >= 0x2060 && cp <= 0x206f) || cp == 0xfeff || (cp >= 0xd800 && cp <= 0xdfff))
    return false;
  if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x205f || cp == 0x3000) return false;
  return true;
}

std::string python_string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  char buf[16];
  for (std::uint32_t cp : utf8_decode(s)) {
    if (cp == static_cast<std::uint32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (!is_printable(cp)) {
      if (cp < 0x100)
        std::snprintf(buf, sizeof buf, "\\x%02x", cp);
      else if (cp < 0x10000)
        std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      else
        std::snprintf(buf, sizeof buf, "\\U%08x", cp);
      out += buf;
    } else {
      utf8_append(out, cp);
    }
  }
  out += quote;
  return out;
}

}  // namespace

std::string Value::repr() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return b_ ? "True" : "False";
    case Kind::kInt:
      return std::to_string(i_);
    case Kind::kFloat:
      return python_float_repr(f_);
    case Kind::kString:
      return python_string_repr(*s_);
    case Kind::kList:
    case Kind::kTuple: {
      std::string out = is_list() ? "[" : "(";
      for (std::size_t i = 0; i < list_->size(); ++i) {
        if (i) out += ", ";
        out += (*list_)[i].repr();
      }
      if (is_tuple() && list_->size() == 1) out += ",";
      return out + (is_list() ? "]" : ")");
    }
    case Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& kv : dict_->items) {
        if (!first) out += ", ";
        first = false;
        out += kv.first.repr() + ": " + kv.second.repr();
      }
      return out + "}";
    }
    case Kind::kNamespace: {
      std::string out = "<Namespace {";
      bool first = true;
      for (const auto& kv : dict_->items) {
        if (!first) out += ", ";
        first = false;
        out += kv.first.repr() + ": " + kv.second.repr();
      }
      return out + "}>";
    }
    case Kind::kCallable:
      return "<" + callable_->name + ">";
    case Kind::kIterator:
      return to_str();
  }
  return "";
}

List Value::iterate() const {
  switch (kind_) {
    case Kind::kUndefined:
      if (undefined_kind_ == ErrorKind::kSecurity) fail_undefined();
      return {};
    case Kind::kList:
    case Kind::kTuple:
      return *list_;
    case Kind::kIterator: {
      List rest(list_->begin() + static_cast<long>(*cursor_), list_->end());
      *cursor_ = list_->size();
      return rest;
    }
    case Kind::kDict: {
      List keys;
      keys.reserve(dict_->items.size());
      for (const auto& kv : dict_->items) keys.push_back(kv.first);
      return keys;
    }
    case Kind::kString: {
      List chars;
      std::string one;
      for (std::uint32_t cp : utf8_decode(*s_)) {
        one.clear();
        utf8_append(one, cp);
        chars.push_back(string(one));
      }
      return chars;
    }
    default:
      fail(ErrorKind::kType, "'" + type_name() + "' object is not iterable");
  }
}

bool Value::first_item(Value* out) const {
  if (is_iterator()) {
    if (*cursor_ >= list_->size()) return false;
    *out = (*list_)[(*cursor_)++];
    return true;
  }
  const List items = iterate();
  if (items.empty()) return false;
  *out = items.front();
  return true;
}

std::int64_t Value::length() const {
  switch (kind_) {
    case Kind::kUndefined:
      return 0;
    case Kind::kString:
      return utf8_length(*s_);
    case Kind::kList:
    case Kind::kTuple:
      return static_cast<std::int64_t>(list_->size());
    case Kind::kDict:
      return static_cast<std::int64_t>(dict_->items.size());
    default:
      fail(ErrorKind::kType, "object of type '" + type_name() + "' has no len()");
  }
}

bool values_equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) {
    // A list never equals a tuple in Python.
    return false;
  }
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone:
      return true;
    case K::kString:
      return a.str() == b.str();
    case K::kList:
    case K::kTuple: {
      const auto& x = a.items();
      const auto& y = b.items();
      if (x.size() != y.size()) return false;
      for (std::size_t i = 0; i < x.size(); ++i) {
        if (!values_equal(x[i], y[i])) return false;
      }
      return true;
    }
    case K::kDict: {
      const auto& x = a.dict_ref().items;
      const auto& y = b.dict_ref();
      if (x.size() != y.items.size()) return false;
      for (const auto& kv : x) {
        const Value* other = y.find(kv.first);
        if (!other || !values_equal(kv.second, *other)) return false;
      }
      return true;
    }
    case K::kIterator:
      return &a.items() == &b.items();
    default:
      return &a.dict_ref() == &b.dict_ref();
  }
}

int compare_values(const Value& a, const Value& b, const char* op) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      const double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    const auto x = a.as_int(), y = b.as_int();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    // Byte order of UTF-8 is code point order, as Python compares.
    const int c = a.str().compare(b.str());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.kind() == b.kind() && a.is_sequence_like()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!values_equal(x[i], y[i])) return compare_values(x[i], y[i], op);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  if (a.is_undefined() || b.is_undefined()) (a.is_undefined() ? a : b).fail_undefined();
  fail(ErrorKind::kType, std::string("'") + op + "' not supported between instances of '" +
                             a.type_name() + "' and '" + b.type_name() + "'");
}

}  // namespace lft::data::jinja
