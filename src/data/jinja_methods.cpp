// Attribute and item access as jinja2's ImmutableSandboxedEnvironment does it, and the Python
// methods chat templates call on str, dict and list. Methods that would mutate a list or dict are
// found but "unsafe": using them raises SecurityError, as in the sandbox.
#include <algorithm>
#include <cctype>

#include "jinja_builtins.h"

namespace lft::data::jinja {
namespace {

// jinja2's object_type_repr, as its Undefined messages print the object.
std::string object_type_repr(const Value& obj) {
  if (obj.is_none()) return "None";
  return obj.type_name() + " object";
}

Value missing_attribute(const Value& obj, const Value& name) {
  // jinja2's wording differs for item keys that are not strings (and drops the quotes).
  if (!name.is_string())
    return Value::undefined(object_type_repr(obj) + " has no element " + name.repr());
  return Value::undefined("'" + object_type_repr(obj) + "' has no attribute " + name.repr());
}

Value unsafe(const Value& obj, const std::string& name) {
  return Value::undefined(
      "access to attribute '" + name + "' of '" + obj.type_name() + "' object is unsafe.",
      ErrorKind::kSecurity);
}

Value method(const std::string& name, NativeFn fn) {
  return Value::callable("built-in method " + name, std::move(fn));
}

std::string str_arg(const CallArgs& a, std::size_t i, const char* name, const char* method) {
  const Value* v = argument(a, i, name);
  if (!v)
    fail(ErrorKind::kType, std::string(method) + "() missing required argument '" + name + "'");
  if (!v->is_string()) {
    fail(ErrorKind::kType, std::string(method) + "() argument must be str, not " + v->type_name());
  }
  return v->str();
}

std::int64_t int_arg(const CallArgs& a, std::size_t i, const char* name, std::int64_t dflt) {
  const Value* v = argument(a, i, name);
  if (!v || v->is_none()) return dflt;
  if (!v->is_int() && !v->is_bool()) fail(ErrorKind::kType, "an integer is required");
  return v->as_int();
}

// str.split / str.rsplit.
Value split(const std::string& s, const CallArgs& a, bool from_right) {
  const Value* sep = argument(a, 0, "sep");
  std::int64_t maxsplit = int_arg(a, 1, "maxsplit", -1);
  std::vector<std::string> parts;
  if (!sep || sep->is_none()) {
    // Runs of whitespace; leading and trailing whitespace give no empty parts.
    const auto cps = utf8_decode(s);
    std::vector<std::pair<std::size_t, std::size_t>> words;
    for (std::size_t i = 0; i < cps.size();) {
      while (i < cps.size() && is_python_space(cps[i])) ++i;
      if (i == cps.size()) break;
      std::size_t j = i;
      while (j < cps.size() && !is_python_space(cps[j])) ++j;
      words.emplace_back(i, j);
      i = j;
    }
    const auto piece = [&](std::size_t b, std::size_t e) {
      return utf8_encode(std::vector<std::uint32_t>(cps.begin() + static_cast<long>(b),
                                                    cps.begin() + static_cast<long>(e)));
    };
    if (maxsplit < 0 || static_cast<std::size_t>(maxsplit) >= words.size()) {
      for (const auto& w : words) parts.push_back(piece(w.first, w.second));
    } else if (!from_right) {
      const auto k = static_cast<std::size_t>(maxsplit);
      for (std::size_t i = 0; i < k; ++i) parts.push_back(piece(words[i].first, words[i].second));
      parts.push_back(piece(words[k].first, cps.size()));  // the rest, trailing space kept
    } else {
      const std::size_t k = words.size() - static_cast<std::size_t>(maxsplit);
      parts.push_back(piece(0, words[k - 1].second));  // the rest, leading space kept
      for (std::size_t i = k; i < words.size(); ++i)
        parts.push_back(piece(words[i].first, words[i].second));
    }
  } else {
    if (!sep->is_string()) fail(ErrorKind::kType, "must be str or None, not " + sep->type_name());
    const std::string& d = sep->str();
    if (d.empty()) fail(ErrorKind::kValue, "empty separator");
    if (!from_right) {
      std::size_t start = 0;
      while (maxsplit != 0) {
        const std::size_t at = s.find(d, start);
        if (at == std::string::npos) break;
        parts.push_back(s.substr(start, at - start));
        start = at + d.size();
        --maxsplit;
      }
      parts.push_back(s.substr(start));
    } else {
      std::size_t end = s.size();
      std::vector<std::string> rev;
      while (maxsplit != 0 && end >= d.size()) {
        const std::size_t at = s.rfind(d, end - d.size());
        if (at == std::string::npos) break;
        rev.push_back(s.substr(at + d.size(), end - at - d.size()));
        end = at;
        --maxsplit;
      }
      rev.push_back(s.substr(0, end));
      parts.assign(rev.rbegin(), rev.rend());
    }
  }
  List out;
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return Value::list(std::move(out));
}

bool affix_matches(const std::string& s, const Value& affix, bool at_start, const char* method) {
  const auto one = [&](const Value& a) {
    if (!a.is_string()) {
      fail(ErrorKind::kType,
           std::string(method) + " first arg must be str or a tuple of str, not " + a.type_name());
    }
    const std::string& x = a.str();
    if (x.size() > s.size()) return false;
    return at_start ? s.compare(0, x.size(), x) == 0
                    : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_tuple()) {
    for (const auto& a : affix.items()) {
      if (one(a)) return true;
    }
    return false;
  }
  return one(affix);
}

// Byte offset -> code point index, for find() results.
std::int64_t cp_index(const std::string& s, std::size_t byte) {
  return utf8_length(s.substr(0, byte));
}

Value string_method(const Value& obj, const std::string& name) {
  const std::string s = obj.str();
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    return method(name, [s, name](const CallArgs& a) {
      return python_str_strip(s, argument(a, 0, "chars"), name != "rstrip", name != "lstrip");
    });
  }
  if (name == "split" || name == "rsplit") {
    return method(name, [s, name](const CallArgs& a) { return split(s, a, name == "rsplit"); });
  }
  if (name == "startswith" || name == "endswith") {
    return method(name, [s, name](const CallArgs& a) {
      const Value* affix = argument(a, 0, "prefix");
      if (!affix) fail(ErrorKind::kType, name + "() takes at least 1 argument (0 given)");
      if (argument(a, 1, "start")) fail(ErrorKind::kType, name + "(start, end) is not supported");
      return Value::boolean(affix_matches(s, *affix, name == "startswith", name.c_str()));
    });
  }
  if (name == "upper")
    return method(name, [s](const CallArgs&) { return Value::string(python_upper(s)); });
  if (name == "lower")
    return method(name, [s](const CallArgs&) { return Value::string(python_lower(s)); });
  if (name == "title")
    return method(name, [s](const CallArgs&) { return Value::string(python_str_title(s)); });
  if (name == "capitalize") {
    return method(name, [s](const CallArgs&) { return Value::string(python_capitalize(s)); });
  }
  if (name == "replace") {
    return method(name, [s](const CallArgs& a) {
      const std::string from = str_arg(a, 0, "old", "replace");
      const std::string to = str_arg(a, 1, "new", "replace");
      std::int64_t count = int_arg(a, 2, "count", -1);
      return apply_filter(
          "replace", Value::string(s),
          CallArgs{{Value::string(from), Value::string(to), Value::integer(count)}, {}});
    });
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    return method(name, [s, name](const CallArgs& a) {
      const std::string sub = str_arg(a, 0, "sub", name.c_str());
      if (argument(a, 1, "start")) fail(ErrorKind::kType, name + "(sub, start) is not supported");
      if (name == "count") {
        if (sub.empty()) return Value::integer(utf8_length(s) + 1);
        std::int64_t n = 0;
        for (std::size_t at = s.find(sub); at != std::string::npos;
             at = s.find(sub, at + sub.size()))
          ++n;
        return Value::integer(n);
      }
      const std::size_t at = name[0] == 'r' ? s.rfind(sub) : s.find(sub);
      if (at == std::string::npos) {
        if (name == "index" || name == "rindex") fail(ErrorKind::kValue, "substring not found");
        return Value::integer(-1);
      }
      return Value::integer(cp_index(s, at));
    });
  }
  if (name == "join") {
    return method(name, [s](const CallArgs& a) {
      const Value* items = argument(a, 0, "iterable");
      if (!items) fail(ErrorKind::kType, "join() takes exactly one argument (0 given)");
      std::string out;
      bool first = true;
      for (const auto& v : items->iterate()) {
        if (!v.is_string()) {
          fail(ErrorKind::kType,
               "sequence item: expected str instance, " + v.type_name() + " found");
        }
        if (!first) out += s;
        first = false;
        out += v.str();
      }
      return Value::string(std::move(out));
    });
  }
  if (name == "splitlines") {
    return method(name, [s](const CallArgs&) {
      List out;
      for (auto& line : python_splitlines(s)) out.push_back(Value::string(std::move(line)));
      return Value::list(std::move(out));
    });
  }
  if (name == "removeprefix" || name == "removesuffix") {
    return method(name, [s, name](const CallArgs& a) {
      const std::string x = str_arg(a, 0, "affix", name.c_str());
      if (name == "removeprefix" && s.compare(0, x.size(), x) == 0)
        return Value::string(s.substr(x.size()));
      if (name == "removesuffix" && x.size() <= s.size() && !x.empty() &&
          s.compare(s.size() - x.size(), x.size(), x) == 0) {
        return Value::string(s.substr(0, s.size() - x.size()));
      }
      return Value::string(s);
    });
  }
  if (name == "isdigit" || name == "isspace" || name == "isalpha" || name == "isalnum" ||
      name == "islower" || name == "isupper") {
    return method(name, [s, name](const CallArgs&) {
      if (!is_ascii(s))
        fail(ErrorKind::kType, "str." + name + "() on non-ASCII text is not supported");
      if (s.empty()) return Value::boolean(false);
      bool cased = false, ok = true;
      for (char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        if (name == "isdigit")
          ok = ok && std::isdigit(c);
        else if (name == "isspace")
          ok = ok && is_python_space(c);
        else if (name == "isalpha")
          ok = ok && std::isalpha(c);
        else if (name == "isalnum")
          ok = ok && std::isalnum(c);
        else if (name == "islower")
          ok = ok && !std::isupper(c), cased = cased || std::islower(c);
        else
          ok = ok && !std::islower(c), cased = cased || std::isupper(c);
      }
      if (name == "islower" || name == "isupper") ok = ok && cased;
      return Value::boolean(ok);
    });
  }
  if (name == "format") {
    return method(name, [s](const CallArgs& a) {
      // Only "{}" and "{N}" fields: the sandbox's format() with anything richer is refused.
      std::string out;
      std::size_t auto_index = 0;
      for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '{' && i + 1 < s.size() && s[i + 1] == '{') {
          out += '{', ++i;
        } else if (s[i] == '}' && i + 1 < s.size() && s[i + 1] == '}') {
          out += '}', ++i;
        } else if (s[i] == '{') {
          const std::size_t close = s.find('}', i);
          if (close == std::string::npos)
            fail(ErrorKind::kValue, "Single '{' encountered in format string");
          const std::string field = s.substr(i + 1, close - i - 1);
          const Value* v = nullptr;
          if (field.empty()) {
            v = auto_index < a.positional.size() ? &a.positional[auto_index++] : nullptr;
          } else if (std::all_of(field.begin(), field.end(), ::isdigit)) {
            const auto k = std::stoul(field);
            v = k < a.positional.size() ? &a.positional[k] : nullptr;
          } else {
            v = a.find(field);
          }
          if (!v)
            fail(ErrorKind::kType,
                 "str.format field '{" + field + "}' is not supported or has no argument");
          out += v->to_str();
          i = close;
        } else {
          out += s[i];
        }
      }
      return Value::string(std::move(out));
    });
  }
  return missing_attribute(obj, Value::string(name));
}

Value dict_method(const Value& obj, const std::string& name) {
  if (name == "items" || name == "keys" || name == "values") {
    return method(name, [obj, name](const CallArgs&) {
      List out;
      for (const auto& kv : obj.dict_ref().items) {
        if (name == "items")
          out.push_back(Value::tuple({kv.first, kv.second}));
        else
          out.push_back(name == "keys" ? kv.first : kv.second);
      }
      return Value::list(std::move(out));
    });
  }
  if (name == "get") {
    return method(name, [obj](const CallArgs& a) {
      const Value* key = argument(a, 0, "key");
      if (!key) fail(ErrorKind::kType, "get expected at least 1 argument, got 0");
      const Value* found = obj.dict_ref().find(*key);
      if (found) return *found;
      const Value* dflt = argument(a, 1, "default");
      return dflt ? *dflt : Value::none();
    });
  }
  if (name == "copy")
    return method(name, [obj](const CallArgs&) { return Value::dict(obj.dict_ref()); });
  return Value();
}

Value list_method(const Value& obj, const std::string& name) {
  if (name == "index" || name == "count") {
    return method(name, [obj, name](const CallArgs& a) {
      const Value* x = argument(a, 0, "value");
      if (!x) fail(ErrorKind::kType, name + "() takes exactly one argument (0 given)");
      std::int64_t n = 0;
      for (std::size_t i = 0; i < obj.items().size(); ++i) {
        if (!values_equal(obj.items()[i], *x)) continue;
        if (name == "index") return Value::integer(static_cast<std::int64_t>(i));
        ++n;
      }
      if (name == "index") fail(ErrorKind::kValue, "" + x->repr() + " is not in list");
      return Value::integer(n);
    });
  }
  if (name == "copy" && obj.is_list()) {
    return method(name, [obj](const CallArgs&) { return Value::list(obj.items()); });
  }
  return Value();
}

}  // namespace

Value get_attribute(const Value& obj, const std::string& name) {
  static const char* const kMutatingList[] = {"append", "clear", "pop",    "reverse",
                                              "insert", "sort",  "extend", "remove"};
  static const char* const kMutatingDict[] = {"clear", "pop", "popitem", "setdefault", "update"};
  switch (obj.kind()) {
    case Value::Kind::kUndefined:
      obj.fail_undefined();
    case Value::Kind::kString:
      if (obj.is_markup()) {
        fail(
            ErrorKind::kType,
            "methods of |safe strings (jinja2 Markup) are not supported by lftrain's Jinja subset");
      }
      return string_method(obj, name);
    case Value::Kind::kDict: {
      for (const char* m : kMutatingDict) {
        if (name == m) return unsafe(obj, name);
      }
      Value m = dict_method(obj, name);
      if (!m.is_undefined()) return m;
      const Value* v = obj.dict_ref().find(name);
      return v ? *v : missing_attribute(obj, Value::string(name));
    }
    case Value::Kind::kNamespace: {
      const Value* v = obj.dict_ref().find(name);
      return v ? *v : missing_attribute(obj, Value::string(name));
    }
    case Value::Kind::kList:
    case Value::Kind::kTuple: {
      if (obj.is_list()) {
        for (const char* m : kMutatingList) {
          if (name == m) return unsafe(obj, name);
        }
      }
      Value m = list_method(obj, name);
      if (!m.is_undefined()) return m;
      return missing_attribute(obj, Value::string(name));
    }
    default:
      return missing_attribute(obj, Value::string(name));
  }
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) obj.fail_undefined();
  if (obj.is_dict()) {
    if (const Value* v = obj.dict_ref().find(key)) return *v;
  } else if ((obj.is_sequence_like() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    const std::int64_t n = obj.length();
    std::int64_t i = key.as_int();
    if (i < 0) i += n;
    if (i >= 0 && i < n) {
      if (obj.is_string()) {
        if (is_ascii(obj.str()))
          return Value::string(obj.str().substr(static_cast<std::size_t>(i), 1));
        std::string one;
        utf8_append(one, utf8_decode(obj.str())[static_cast<std::size_t>(i)]);
        return Value::string(one);
      }
      return obj.items()[static_cast<std::size_t>(i)];
    }
  }
  if (key.is_string()) {
    if (obj.is_dict()) {
      // Only a method can remain (the item was missing).
      Value m = get_attribute(obj, key.str());
      if (m.is_callable() || m.undefined_kind() == ErrorKind::kSecurity) return m;
    } else {
      Value a = get_attribute(obj, key.str());
      if (!a.is_undefined() || a.undefined_kind() == ErrorKind::kSecurity) return a;
    }
  }
  return missing_attribute(obj, key);
}

}  // namespace lft::data::jinja
