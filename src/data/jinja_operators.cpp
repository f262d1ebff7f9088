// Python's operator semantics, which jinja2 inherits: int and float stay apart (/ always gives a
// float, // floors, % takes the divisor's sign), + concatenates only like types, and every
// mismatch raises TypeError with Python's wording.
#include <cmath>

#include "jinja_builtins.h"

namespace lft::data::jinja {
namespace {

std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  std::int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

// Python ints are unbounded; int64 arithmetic that would wrap is refused instead.
void check_overflow(bool overflowed) {
  if (overflowed)
    fail(ErrorKind::kOverflow, "integer result does not fit in 64 bits (Python would go on)");
}
std::int64_t add(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  check_overflow(__builtin_add_overflow(a, b, &r));
  return r;
}
std::int64_t sub(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  check_overflow(__builtin_sub_overflow(a, b, &r));
  return r;
}
std::int64_t mul(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  check_overflow(__builtin_mul_overflow(a, b, &r));
  return r;
}

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  fail(ErrorKind::kType, "unsupported operand type(s) for " + op + ": '" + a.type_name() +
                             "' and '" + b.type_name() + "'");
}

Value repeat(const Value& seq, std::int64_t n) {
  if (seq.is_string()) {
    std::string out;
    for (std::int64_t i = 0; i < n; ++i) out += seq.str();
    return seq.is_markup() ? Value::markup(std::move(out)) : Value::string(std::move(out));
  }
  List out;
  for (std::int64_t i = 0; i < n; ++i)
    out.insert(out.end(), seq.items().begin(), seq.items().end());
  return seq.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

// "%s" % value, for the conversions templates use (%s %d %i %r %%).
Value percent_format(const std::string& format, const Value& args) {
  List values = args.is_tuple() ? args.items() : List{args};
  std::size_t next = 0;
  std::string out;
  for (std::size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    if (++i >= format.size()) fail(ErrorKind::kType, "incomplete format");
    const char c = format[i];
    if (c == '%') {
      out += '%';
      continue;
    }
    if (next >= values.size()) fail(ErrorKind::kType, "not enough arguments for format string");
    const Value& v = values[next++];
    if (c == 's')
      out += v.to_str();
    else if (c == 'r')
      out += v.repr();
    else if ((c == 'd' || c == 'i') && v.is_number()) {
      out += std::to_string(v.is_float() ? static_cast<std::int64_t>(v.as_double()) : v.as_int());
    } else {
      fail(ErrorKind::kType,
           std::string("format '%") + c + "' is not supported by lftrain's Jinja subset");
    }
  }
  if (next < values.size())
    fail(ErrorKind::kType, "not all arguments converted during string formatting");
  return Value::string(std::move(out));
}

}  // namespace

Value negate(const Value& v) {
  if (v.is_undefined()) v.fail_undefined();
  if (v.is_float()) return Value::floating(-v.as_double());
  if (v.is_number()) return Value::integer(-v.as_int());
  fail(ErrorKind::kType, "bad operand type for unary -: '" + v.type_name() + "'");
}

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value::string(a.to_str() + b.to_str());
  if (a.is_undefined()) a.fail_undefined();
  if (b.is_undefined()) b.fail_undefined();
  const bool numbers = a.is_number() && b.is_number();
  const bool floats = numbers && (a.is_float() || b.is_float());
  if (op == "+") {
    if (numbers)
      return floats ? Value::floating(a.as_double() + b.as_double())
                    : Value::integer(add(a.as_int(), b.as_int()));
    if (a.is_markup() || b.is_markup()) {  // Markup.__add__ / __radd__ escape the plain side
      if (!a.is_string() || !b.is_string()) unsupported("+", a, b);
      return Value::markup((a.is_markup() ? a.str() : html_escape(a.str())) +
                           (b.is_markup() ? b.str() : html_escape(b.str())));
    }
    if (a.is_string() && b.is_string()) return Value::string(a.str() + b.str());
    if (a.is_string()) {
      fail(ErrorKind::kType, "can only concatenate str (not \"" + b.type_name() + "\") to str");
    }
    if (a.kind() == b.kind() && a.is_sequence_like()) {
      List out = a.items();
      out.insert(out.end(), b.items().begin(), b.items().end());
      return a.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
    }
    if (a.is_sequence_like()) {
      fail(ErrorKind::kType, "can only concatenate " + a.type_name() + " (not \"" + b.type_name() +
                                 "\") to " + a.type_name());
    }
    unsupported("+", a, b);
  }
  if (op == "-") {
    if (!numbers) unsupported("-", a, b);
    return floats ? Value::floating(a.as_double() - b.as_double())
                  : Value::integer(sub(a.as_int(), b.as_int()));
  }
  if (op == "*") {
    if (numbers)
      return floats ? Value::floating(a.as_double() * b.as_double())
                    : Value::integer(mul(a.as_int(), b.as_int()));
    if ((a.is_string() || a.is_sequence_like()) && b.is_number() && !b.is_float())
      return repeat(a, b.as_int());
    if ((b.is_string() || b.is_sequence_like()) && a.is_number() && !a.is_float())
      return repeat(b, a.as_int());
    unsupported("*", a, b);
  }
  if (op == "/") {
    if (!numbers) unsupported("/", a, b);
    if (b.as_double() == 0.0) fail(ErrorKind::kZeroDivision, "division by zero");
    return Value::floating(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") {
    if (op == "%" && a.is_markup())
      fail(ErrorKind::kType,
           "'%' on a |safe string (Markup) is not supported by lftrain's Jinja subset");
    if (op == "%" && a.is_string()) return percent_format(a.str(), b);
    if (!numbers) unsupported(op, a, b);
    if (b.as_double() == 0.0) {
      fail(ErrorKind::kZeroDivision,
           op == "%" ? "integer modulo by zero" : "integer division or modulo by zero");
    }
    if (floats) {
      const double x = a.as_double(), y = b.as_double();
      const double m = std::fmod(x, y);
      const double mod = (m != 0.0 && ((m < 0) != (y < 0))) ? m + y : m;
      if (op == "%") return Value::floating(mod);
      return Value::floating(std::floor((x - mod) / y));
    }
    const std::int64_t q = floor_div(a.as_int(), b.as_int());
    return op == "//" ? Value::integer(q) : Value::integer(a.as_int() - q * b.as_int());
  }
  if (op == "**") {
    if (!numbers) unsupported("** or pow()", a, b);
    if (!floats && b.as_int() >= 0) {
      std::int64_t r = 1, base = a.as_int();
      for (std::int64_t e = b.as_int(); e > 0; --e) r = mul(r, base);
      return Value::integer(r);
    }
    return Value::floating(std::pow(a.as_double(), b.as_double()));
  }
  fail(ErrorKind::kRuntime, "unknown operator " + op);
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        fail(ErrorKind::kType,
             "'in <string>' requires string as left operand, not " + item.type_name());
      }
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::kIterator:  // consumes it, as `in` does in Python
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      for (const auto& v : container.iterate()) {
        if (values_equal(v, item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      return container.dict_ref().find(item) != nullptr;
    default:
      fail(ErrorKind::kType, "argument of type '" + container.type_name() + "' is not iterable");
  }
}

Value call_value(const Value& callee, const CallArgs& args) {
  if (callee.is_undefined()) callee.fail_undefined();
  if (!callee.is_callable())
    fail(ErrorKind::kType, "'" + callee.type_name() + "' object is not callable");
  return callee.callable_ref().fn(args);
}

Value get_slice(const Value& obj, const Value* start, const Value* stop, const Value* step) {
  if (obj.is_undefined()) obj.fail_undefined();
  const bool text = obj.is_string();
  if (!text && !obj.is_sequence_like()) {
    fail(ErrorKind::kType, "'" + obj.type_name() + "' object is not subscriptable");
  }
  const auto as_index = [](const Value* v) -> const Value* {
    if (!v || v->is_none()) return nullptr;
    if (!v->is_int() && !v->is_bool()) {
      fail(ErrorKind::kType, "slice indices must be integers or None or have an __index__ method");
    }
    return v;
  };
  start = as_index(start), stop = as_index(stop), step = as_index(step);
  const std::int64_t st = step ? step->as_int() : 1;
  if (st == 0) fail(ErrorKind::kValue, "slice step cannot be zero");
  std::vector<std::uint32_t> cps;
  if (text) cps = utf8_decode(obj.str());
  const auto n = static_cast<std::int64_t>(text ? cps.size() : obj.items().size());
  // PySlice_AdjustIndices
  const auto adjust = [&](const Value* v, std::int64_t dflt) {
    if (!v) return dflt;
    std::int64_t i = v->as_int();
    if (i < 0) {
      i += n;
      if (i < 0) i = st < 0 ? -1 : 0;
    } else if (i >= n) {
      i = st < 0 ? n - 1 : n;
    }
    return i;
  };
  const std::int64_t b = adjust(start, st < 0 ? n - 1 : 0);
  const std::int64_t e = adjust(stop, st < 0 ? -1 : n);
  std::vector<std::int64_t> picks;
  if (st > 0) {
    for (std::int64_t i = b; i < e; i += st) picks.push_back(i);
  } else {
    for (std::int64_t i = b; i > e; i += st) picks.push_back(i);
  }
  if (text) {
    std::string out;
    for (auto i : picks) utf8_append(out, cps[static_cast<std::size_t>(i)]);
    return Value::string(std::move(out));
  }
  List out;
  for (auto i : picks) out.push_back(obj.items()[static_cast<std::size_t>(i)]);
  return obj.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

}  // namespace lft::data::jinja
