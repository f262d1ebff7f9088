// The public entry points and the globals transformers gives every chat template.
#include <ctime>

#include "jinja_builtins.h"
#include "jinja_eval.h"
#include "lft/data/jinja.h"

namespace lft::data::jinja {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kSyntax:
      return "TemplateSyntaxError";
    case ErrorKind::kUndefined:
      return "UndefinedError";
    case ErrorKind::kType:
      return "TypeError";
    case ErrorKind::kValue:
      return "ValueError";
    case ErrorKind::kZeroDivision:
      return "ZeroDivisionError";
    case ErrorKind::kOverflow:
      return "OverflowError";
    case ErrorKind::kSecurity:
      return "SecurityError";
    case ErrorKind::kRaised:
      return "TemplateError";
    case ErrorKind::kRuntime:
      return "TemplateRuntimeError";
  }
  return "Error";
}

namespace {


std::string describe(ErrorKind kind, const std::string& message, const std::string& name,
                     int line) {
  if (kind == ErrorKind::kRaised) return message;
  std::string where = name.empty() ? "" : name;
  if (line > 0) where += (where.empty() ? "line " : ":") + std::to_string(line);
  return (where.empty() ? "" : where + ": ") + error_kind_name(kind) + ": " + message;
}

// range() as the sandbox's safe_range: Python's range, at most 100000 items.
Value range(const CallArgs& a) {
  std::int64_t start = 0, stop = 0, step = 1;
  const auto n = a.positional.size();
  const auto as_int = [](const Value& v) {
    if (v.is_undefined()) v.fail_undefined();
    if (!v.is_int() && !v.is_bool()) {
      fail(ErrorKind::kType, "'" + v.type_name() + "' object cannot be interpreted as an integer");
    }
    return v.as_int();
  };
  if (n == 1)
    stop = as_int(a.positional[0]);
  else if (n == 2 || n == 3)
    start = as_int(a.positional[0]), stop = as_int(a.positional[1]);
  else
    fail(ErrorKind::kType, "range expected 1 to 3 arguments, got " + std::to_string(n));
  if (n == 3) step = as_int(a.positional[2]);
  if (step == 0) fail(ErrorKind::kValue, "range() arg 3 must not be zero");
  List out;
  for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (out.size() >= 100000) {
      fail(ErrorKind::kOverflow,
           "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    }
    out.push_back(Value::integer(i));
  }
  return Value::list(std::move(out));
}

Value::Dict dict_from_args(const CallArgs& a, const char* what) {
  Value::Dict d;
  if (a.positional.size() > 1)
    fail(ErrorKind::kType, std::string(what) + " expected at most 1 argument");
  if (!a.positional.empty()) {
    const Value& src = a.positional[0];
    if (src.is_dict()) {
      d = src.dict_ref();
    } else {
      for (const auto& pair : src.iterate()) {
        const List kv = pair.iterate();
        if (kv.size() != 2)
          fail(ErrorKind::kType, "dictionary update sequence element has wrong length");
        d.set(kv[0], kv[1]);
      }
    }
  }
  for (const auto& kv : a.keyword) d.set(Value::string(kv.first), kv.second);
  return d;
}

}  // namespace

Error::Error(ErrorKind kind, std::string message, std::string template_name, int line)
    : std::runtime_error(describe(kind, message, template_name, line)),
      kind_(kind),
      message_(std::move(message)),
      template_name_(std::move(template_name)),
      line_(line) {}

void add_globals(Scope& scope) {
  scope.set("range", Value::callable("range", range));
  scope.set("namespace", Value::callable("namespace", [](const CallArgs& a) {
              Value::Dict attrs = dict_from_args(a, "namespace");
              for (const auto& kv : attrs.items) {
                if (kv.first.is_string() && !kv.first.str().empty() && kv.first.str()[0] == '_') {
                  fail(ErrorKind::kSecurity,
                       "Chat templates cannot store underscore-prefixed attributes on a namespace, "
                       "but got " +
                           kv.first.repr() + ". Please rename the attribute.");
                }
              }
              return Value::namespace_(std::move(attrs));
            }));
  scope.set("dict", Value::callable("dict", [](const CallArgs& a) {
              return Value::dict(dict_from_args(a, "dict"));
            }));
  scope.set("raise_exception", Value::callable("raise_exception", [](const CallArgs& a) -> Value {
              const Value* m = argument(a, 0, "message");
              throw Error(ErrorKind::kRaised, m ? m->to_str() : std::string());
            }));
  scope.set("strftime_now", Value::callable("strftime_now", [](const CallArgs& a) {
              const Value* f = argument(a, 0, "format");
              if (!f || !f->is_string())
                fail(ErrorKind::kType, "strftime_now() needs a format string");
              const std::time_t now = std::time(nullptr);
              std::tm local{};
              localtime_r(&now, &local);
              char buf[512];
              const std::size_t n = std::strftime(buf, sizeof buf, f->str().c_str(), &local);
              return Value::string(std::string(buf, n));
            }));
}

Template Template::parse(const std::string& text, const std::string& name) {
  return Template(parse_program(text, name));
}

const std::string& Template::name() const { return program_->name; }

std::string Template::render(const nlohmann::ordered_json& context,
                             std::vector<Span>* generation_spans, SpanUnit unit) const {
  if (!context.is_object())
    throw Error(ErrorKind::kType, "the context must be a JSON object", program_->name);
  auto globals = std::make_shared<Scope>();
  add_globals(*globals);
  try {
    // Context variables shadow the globals, as in jinja2's render(**context).
    for (auto it = context.begin(); it != context.end(); ++it) {
      globals->set(it.key(), Value::from_json(it.value()));
    }
  } catch (const Error& err) {
    throw Error(err.kind(), err.message(), program_->name);
  }
  Renderer renderer(*program_, std::move(globals), generation_spans, unit);
  return renderer.run();
}

}  // namespace lft::data::jinja
