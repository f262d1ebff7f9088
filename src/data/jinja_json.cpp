// json.dumps as transformers' tojson filter calls it. Written by hand rather than with
// nlohmann::json because Python's output differs: floats print as repr() ("1e-05", "2.0"),
// separators default to ", " and ": ", and indent puts each item on its own line.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "jinja_value.h"

namespace lft::data::jinja {
namespace {

void write_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  char buf[16];
  const auto escape_cp = [&](std::uint32_t cp) {
    std::snprintf(buf, sizeof buf, "\\u%04x", cp);
    out += buf;
  };
  for (std::uint32_t cp : utf8_decode(s)) {
    switch (cp) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (cp < 0x20 || (ensure_ascii && cp >= 0x7f)) {
          if (cp >= 0x10000) {  // a surrogate pair, as Python writes it
            const std::uint32_t v = cp - 0x10000;
            escape_cp(0xd800 | (v >> 10));
            escape_cp(0xdc00 | (v & 0x3ff));
          } else {
            escape_cp(cp);
          }
        } else {
          utf8_append(out, cp);
        }
    }
  }
  out += '"';
}

std::string key_text(const Value& key) {
  // json.dumps turns non-string keys into strings (True -> "true", 1 -> "1", None -> "null").
  if (key.is_string()) return key.str();
  if (key.is_bool()) return key.as_bool() ? "true" : "false";
  if (key.is_none()) return "null";
  if (key.is_int()) return std::to_string(key.as_int());
  if (key.is_float()) return python_float_repr(key.as_double());
  fail(ErrorKind::kType, "keys must be str, int, float, bool or None, not " + key.type_name());
}

class JsonWriter {
 public:
  JsonWriter(std::string& out, const JsonOptions& o) : out_(out), o_(o) {}

  void write(const Value& v, int depth) {
    switch (v.kind()) {
      case Value::Kind::kNone:
        out_ += "null";
        return;
      case Value::Kind::kBool:
        out_ += v.as_bool() ? "true" : "false";
        return;
      case Value::Kind::kInt:
        out_ += std::to_string(v.as_int());
        return;
      case Value::Kind::kFloat:
        write_float(v.as_double());
        return;
      case Value::Kind::kString:
        write_string(out_, v.str(), o_.ensure_ascii);
        return;
      case Value::Kind::kList:
      case Value::Kind::kTuple:
        write_list(v.items(), depth);
        return;
      case Value::Kind::kDict:
        write_dict(v.dict_ref(), depth);
        return;
      case Value::Kind::kUndefined:  // json.dumps knows no Undefined: TypeError, not UndefinedError
        fail(ErrorKind::kType, "Object of type Undefined is not JSON serializable");
      default:
        fail(ErrorKind::kType, "Object of type " + v.type_name() + " is not JSON serializable");
    }
  }

 private:
  void write_float(double d) {
    std::string r = python_float_repr(d);
    if (r == "nan") r = "NaN";
    if (r == "inf") r = "Infinity";
    if (r == "-inf") r = "-Infinity";
    out_ += r;
  }
  void newline(int depth) {
    out_ += '\n';
    for (int i = 0; i < depth; ++i) out_ += o_.indent_text;
  }
  void write_list(const List& items, int depth) {
    if (items.empty()) {
      out_ += "[]";
      return;
    }
    out_ += '[';
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (i) out_ += o_.item_separator;
      if (o_.has_indent) newline(depth + 1);
      write(items[i], depth + 1);
    }
    if (o_.has_indent) newline(depth);
    out_ += ']';
  }
  void write_dict(const Value::Dict& d, int depth) {
    if (d.items.empty()) {
      out_ += "{}";
      return;
    }
    std::vector<const std::pair<Value, Value>*> order;
    for (const auto& kv : d.items) order.push_back(&kv);
    if (o_.sort_keys) {
      std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
        return compare_values(a->first, b->first, "<") < 0;
      });
    }
    out_ += '{';
    bool first = true;
    for (const auto* kv : order) {
      if (!first) out_ += o_.item_separator;
      first = false;
      if (o_.has_indent) newline(depth + 1);
      write_string(out_, key_text(kv->first), o_.ensure_ascii);
      out_ += o_.key_separator;
      write(kv->second, depth + 1);
    }
    if (o_.has_indent) newline(depth);
    out_ += '}';
  }

  std::string& out_;
  const JsonOptions& o_;
};

}  // namespace

std::string python_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0.0) return std::signbit(d) ? "-0.0" : "0.0";
  // Shortest digits that read back exactly (what repr() picks).
  char buf[40];
  int precision = 1;
  for (; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*e", precision - 1, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  // buf is [-]D.DDDDe[+-]XX: split digits and exponent.
  std::string s = buf;
  const bool negative = s[0] == '-';
  if (negative) s.erase(0, 1);
  const auto e = s.find('e');
  const int exponent = std::atoi(s.c_str() + e + 1);
  std::string digits;
  for (std::size_t i = 0; i < e; ++i) {
    if (s[i] != '.') digits += s[i];
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out;
  if (exponent < -4 || exponent >= 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof exp, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += exp;
  } else if (exponent < 0) {
    out = "0." + std::string(static_cast<std::size_t>(-exponent - 1), '0') + digits;
  } else {
    const auto int_len = static_cast<std::size_t>(exponent) + 1;
    if (digits.size() <= int_len) {
      out = digits + std::string(int_len - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, int_len) + "." + digits.substr(int_len);
    }
  }
  return negative ? "-" + out : out;
}

std::string to_python_json(const Value& value, const JsonOptions& options) {
  std::string out;
  JsonWriter(out, options).write(value, 0);
  return out;
}

std::string python_json_dumps(const nlohmann::ordered_json& value) {
  JsonOptions options;
  options.ensure_ascii = true;
  return to_python_json(Value::from_json(value), options);
}

}  // namespace lft::data::jinja
