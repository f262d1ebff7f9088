// jinja2's filters (filters.py) that chat templates use, plus transformers' tojson. Filters that
// return generators in jinja2 (map, select, reject, selectattr, rejectattr, unique, items, batch,
// reverse) return Value::iterator, so `if x|selectattr(...)` is always true and `|length` fails
// there as in jinja2.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>

#include "jinja_ast.h"
#include "jinja_builtins.h"

namespace lft::data::jinja {
namespace {

using FilterFn = std::function<Value(const Value&, const CallArgs&)>;

bool bool_arg(const CallArgs& a, std::size_t i, const char* name, bool dflt) {
  const Value* v = argument(a, i, name);
  return v ? v->truthy() : dflt;
}

// Dotted attribute lookup used by map/sort/selectattr ("a.b" and "0" as an index).
Value attribute_path(const Value& item, const std::string& path) {
  Value v = item;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = path.find('.', start);
    const std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    v = digits ? get_item(v, Value::integer(std::stoll(part))) : get_item(v, Value::string(part));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

// Sort key: strings lowered unless case-sensitive (jinja2's ignore_case).
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(python_lower(v.str()));
  return v;
}

Value same_flavour(const Value& like, std::string s) {
  return like.is_markup() ? Value::markup(std::move(s)) : Value::string(std::move(s));
}

CallArgs shift_args(const CallArgs& a, std::size_t n) {
  CallArgs rest;
  if (a.positional.size() > n)
    rest.positional.assign(a.positional.begin() + static_cast<long>(n), a.positional.end());
  rest.keyword = a.keyword;
  return rest;
}

// select/reject/selectattr/rejectattr.
Value select(const Value& seq, const CallArgs& a, bool by_attribute, bool keep) {
  if (!seq.truthy())
    return Value::iterator({});  // jinja2: `if value:` before iterating (None -> empty)
  std::string attr;
  std::size_t next = 0;
  if (by_attribute) {
    const Value* v = argument(a, 0, nullptr);
    if (!v || !v->is_string()) fail(ErrorKind::kType, "selectattr needs an attribute name");
    attr = v->str();
    next = 1;
  }
  const Value* test = argument(a, next, nullptr);
  if (test && !test->is_string()) fail(ErrorKind::kType, "test name must be a string");
  if (test && !has_test(test->str()))
    fail(ErrorKind::kRuntime, "No test named '" + test->str() + "'.");
  const CallArgs test_args = shift_args(CallArgs{a.positional, {}}, next + 1);
  List out;
  for (const auto& item : seq.iterate()) {
    const Value subject = by_attribute ? attribute_path(item, attr) : item;
    const bool passed = test ? apply_test(test->str(), subject, test_args) : subject.truthy();
    if (passed == keep) out.push_back(item);
  }
  return Value::iterator(std::move(out));
}

Value tojson(const Value& v, const CallArgs& a) {
  // transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
  check_arity(a, 4, "tojson");
  JsonOptions o;
  o.ensure_ascii = bool_arg(a, 0, "ensure_ascii", false);
  const Value* indent = argument(a, 1, "indent");
  if (indent && !indent->is_none()) {
    o.has_indent = true;
    if (indent->is_string())
      o.indent_text = indent->str();
    else
      o.indent_text =
          std::string(static_cast<std::size_t>(std::max<std::int64_t>(0, indent->as_int())), ' ');
    o.item_separator = ",";
  }
  const Value* separators = argument(a, 2, "separators");
  if (separators && !separators->is_none()) {
    if (!separators->is_sequence_like() || separators->items().size() != 2) {
      fail(ErrorKind::kType, "tojson separators must be a pair of strings");
    }
    o.item_separator = separators->items()[0].to_str();
    o.key_separator = separators->items()[1].to_str();
  }
  o.sort_keys = bool_arg(a, 3, "sort_keys", false);
  return Value::string(to_python_json(v, o));
}

Value min_max(const Value& seq, const CallArgs& a, bool want_max) {
  const bool cs = bool_arg(a, 0, "case_sensitive", false);
  const Value* attr = argument(a, 1, "attribute");
  const List items = seq.iterate();
  if (items.empty())
    return Value::undefined(std::string("No aggregated item, sequence was empty."));
  std::size_t best = 0;
  const auto key = [&](const Value& v) {
    return sort_key(attr && !attr->is_none() ? attribute_path(v, attr->to_str()) : v, cs);
  };
  for (std::size_t i = 1; i < items.size(); ++i) {
    const int c = compare_values(key(items[i]), key(items[best]), want_max ? ">" : "<");
    if (want_max ? c > 0 : c < 0) best = i;
  }
  return items[best];
}

std::string indent_text(const std::string& s0, const CallArgs& a) {
  const Value* width = argument(a, 0, "width");
  std::string pad = "    ";
  if (width)
    pad = width->is_string() ? width->str()
                             : std::string(static_cast<std::size_t>(width->as_int()), ' ');
  const bool first = bool_arg(a, 1, "first", false);
  const bool blank = bool_arg(a, 2, "blank", false);
  const auto lines = python_splitlines(s0 + "\n");
  std::string rv;
  if (blank) {
    for (std::size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + pad : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (std::size_t i = 1; i < lines.size(); ++i)
      rv += "\n" + (lines[i].empty() ? "" : pad + lines[i]);
  }
  return first ? pad + rv : rv;
}

const std::map<std::string, FilterFn>& filters() {
  static const std::map<std::string, FilterFn> table = [] {
    std::map<std::string, FilterFn> f;
    f["tojson"] = tojson;
    f["string"] = [](const Value& v, const CallArgs&) {
      return v.is_string() ? v : Value::string(v.to_str());
    };
    f["safe"] = [](const Value& v, const CallArgs&) {
      return v.is_markup() ? v : Value::markup(v.to_str());
    };
    f["e"] = f["escape"] = [](const Value& v, const CallArgs&) {
      return v.is_markup() ? v : Value::markup(html_escape(v.to_str()));
    };
    // These keep a Markup a Markup (jinja2 calls the Markup's own str methods).
    f["trim"] = [](const Value& v, const CallArgs& a) {
      return same_flavour(v,
                          python_str_strip(v.to_str(), argument(a, 0, "chars"), true, true).str());
    };
    f["upper"] = [](const Value& v, const CallArgs&) {
      return same_flavour(v, python_upper(v.to_str()));
    };
    f["lower"] = [](const Value& v, const CallArgs&) {
      return same_flavour(v, python_lower(v.to_str()));
    };
    f["title"] = [](const Value& v, const CallArgs&) {
      return same_flavour(v, python_title(v.to_str()));
    };
    f["capitalize"] = [](const Value& v, const CallArgs&) {
      return same_flavour(v, python_capitalize(v.to_str()));
    };
    f["length"] =
        f["count"] = [](const Value& v, const CallArgs&) { return Value::integer(v.length()); };
    f["wordcount"] = [](const Value& v, const CallArgs&) {
      std::int64_t n = 0;
      bool in_word = false;
      for (std::uint32_t c : utf8_decode(v.to_str())) {
        const bool w =
            c == '_' || (c < 0x80 ? std::isalnum(static_cast<int>(c)) != 0 : !is_python_space(c));
        if (w && !in_word) ++n;
        in_word = w;
      }
      return Value::integer(n);
    };
    f["replace"] = [](const Value& v, const CallArgs& a) {
      const std::string s = v.to_str();
      const Value* from = argument(a, 0, "old");
      const Value* to = argument(a, 1, "new");
      if (!from || !to) fail(ErrorKind::kType, "replace() needs old and new");
      const std::string o = from->to_str(), n = to->to_str();
      const Value* count_v = argument(a, 2, "count");
      std::int64_t count = count_v && !count_v->is_none() ? count_v->as_int() : -1;
      std::string out;
      if (o.empty()) {  // Python inserts `new` around every code point
        const auto cps = utf8_decode(s);
        for (std::size_t i = 0; i <= cps.size(); ++i) {
          if (count != 0) out += n, --count;
          if (i < cps.size()) utf8_append(out, cps[i]);
        }
        return Value::string(out);
      }
      std::size_t start = 0;
      while (count != 0) {
        const std::size_t at = s.find(o, start);
        if (at == std::string::npos) break;
        out += s.substr(start, at - start) + n;
        start = at + o.size();
        --count;
      }
      return Value::string(out + s.substr(start));
    };
    f["default"] = f["d"] = [](const Value& v, const CallArgs& a) {
      const Value* dflt = argument(a, 0, "default_value");
      const bool boolean = bool_arg(a, 1, "boolean", false);
      if (v.is_undefined() || (boolean && !v.truthy())) return dflt ? *dflt : Value::string("");
      return v;
    };
    f["first"] = [](const Value& v, const CallArgs&) {
      Value item;
      return v.first_item(&item) ? item : Value::undefined("No first item, sequence was empty.");
    };
    f["last"] = [](const Value& v, const CallArgs&) {
      if (v.is_iterator())
        fail(ErrorKind::kType, "'" + v.type_name() + "' object is not reversible");
      const List items = v.iterate();
      return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
    };
    f["list"] = [](const Value& v, const CallArgs&) { return Value::list(v.iterate()); };
    f["reverse"] = [](const Value& v, const CallArgs&) {
      const Value step = Value::integer(-1);
      if (v.is_string()) return get_slice(v, nullptr, nullptr, &step);
      List items = v.iterate();
      std::reverse(items.begin(), items.end());
      // reversed() gives an iterator for what Python can reverse; a generator is listed first.
      if (v.is_iterator() || v.is_undefined()) return Value::list(std::move(items));
      return Value::iterator(std::move(items),
                             v.is_dict() ? "dict_reversekeyiterator" : "list_reverseiterator");
    };
    f["join"] = [](const Value& v, const CallArgs& a) {
      const Value* sep = argument(a, 0, "d");
      const Value* attr = argument(a, 1, "attribute");
      std::string out;
      bool first = true;
      for (const auto& item : v.iterate()) {
        if (!first && sep) out += sep->to_str();
        first = false;
        out += (attr && !attr->is_none() ? attribute_path(item, attr->to_str()) : item).to_str();
      }
      return Value::string(out);
    };
    f["int"] = [](const Value& v, const CallArgs& a) {
      const Value* dflt = argument(a, 0, "default");
      const Value fallback = dflt ? *dflt : Value::integer(0);
      if (v.is_float()) return Value::integer(static_cast<std::int64_t>(v.as_double()));
      if (v.is_number()) return Value::integer(v.as_int());
      if (v.is_string()) {
        const std::string s = python_str_strip(v.str(), nullptr, true, true).str();
        char* end = nullptr;
        const long long i = std::strtoll(s.c_str(), &end, 10);
        if (!s.empty() && *end == '\0') return Value::integer(i);
        const double d = std::strtod(s.c_str(), &end);
        if (!s.empty() && *end == '\0') return Value::integer(static_cast<std::int64_t>(d));
      }
      return fallback;
    };
    f["float"] = [](const Value& v, const CallArgs& a) {
      const Value* dflt = argument(a, 0, "default");
      if (v.is_number()) return Value::floating(v.as_double());
      if (v.is_string()) {
        const std::string s = python_str_strip(v.str(), nullptr, true, true).str();
        char* end = nullptr;
        const double d = std::strtod(s.c_str(), &end);
        if (!s.empty() && *end == '\0') return Value::floating(d);
      }
      return dflt ? *dflt : Value::floating(0.0);
    };
    f["abs"] = [](const Value& v, const CallArgs&) {
      if (v.is_float()) return Value::floating(std::fabs(v.as_double()));
      if (v.is_number()) return Value::integer(std::llabs(v.as_int()));
      fail(ErrorKind::kType, "bad operand type for abs(): '" + v.type_name() + "'");
    };
    f["round"] = [](const Value& v, const CallArgs& a) {
      const Value* p = argument(a, 0, "precision");
      const Value* m = argument(a, 1, "method");
      const std::string method = m ? m->to_str() : "common";
      // round(int) stays an int in Python; ceil and floor go through a float division.
      if (method == "common" && (v.is_int() || v.is_bool()) && (!p || p->as_int() >= 0)) {
        return Value::integer(v.as_int());
      }
      const double scale = std::pow(10.0, p ? static_cast<double>(p->as_int()) : 0.0);
      const double x = v.as_double() * scale;
      double r;
      if (method == "ceil")
        r = std::ceil(x);
      else if (method == "floor")
        r = std::floor(x);
      else if (method == "common") {
        // Python's round() rounds the exact binary value (2.675 -> 2.67); so does printf.
        const int digits = p ? static_cast<int>(p->as_int()) : 0;
        if (digits >= 0 && digits < 300) {
          char buf[400];
          std::snprintf(buf, sizeof buf, "%.*f", digits, v.as_double());
          return Value::floating(std::strtod(buf, nullptr));
        }
        r = std::nearbyint(x);
      } else
        fail(ErrorKind::kType, "method must be common, ceil or floor");
      return Value::floating(r / scale);
    };
    f["items"] = [](const Value& v, const CallArgs&) {
      if (v.is_undefined()) return Value::iterator({});
      if (!v.is_dict()) fail(ErrorKind::kType, "Can only get item pairs from a mapping.");
      List out;
      for (const auto& kv : v.dict_ref().items) out.push_back(Value::tuple({kv.first, kv.second}));
      return Value::iterator(std::move(out));
    };
    f["dictsort"] = [](const Value& v, const CallArgs& a) {
      if (!v.is_dict()) fail(ErrorKind::kType, "dictsort needs a mapping");
      const bool cs = bool_arg(a, 0, "case_sensitive", false);
      const Value* by = argument(a, 1, "by");
      const bool by_value = by && by->to_str() == "value";
      const bool reverse = bool_arg(a, 2, "reverse", false);
      List out;
      for (const auto& kv : v.dict_ref().items) out.push_back(Value::tuple({kv.first, kv.second}));
      std::stable_sort(out.begin(), out.end(), [&](const Value& x, const Value& y) {
        const int c = compare_values(sort_key(x.items()[by_value], cs),
                                     sort_key(y.items()[by_value], cs), "<");
        return reverse ? c > 0 : c < 0;
      });
      return Value::list(std::move(out));
    };
    f["sort"] = [](const Value& v, const CallArgs& a) {
      const bool reverse = bool_arg(a, 0, "reverse", false);
      const bool cs = bool_arg(a, 1, "case_sensitive", false);
      const Value* attr = argument(a, 2, "attribute");
      List items = v.iterate();
      const auto key = [&](const Value& x) {
        return sort_key(attr && !attr->is_none() ? attribute_path(x, attr->to_str()) : x, cs);
      };
      std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
        const int c = compare_values(key(x), key(y), "<");
        return reverse ? c > 0 : c < 0;
      });
      return Value::list(std::move(items));
    };
    f["unique"] = [](const Value& v, const CallArgs& a) {
      const bool cs = bool_arg(a, 0, "case_sensitive", false);
      const Value* attr = argument(a, 1, "attribute");
      List out, seen;
      for (const auto& item : v.iterate()) {
        const Value k =
            sort_key(attr && !attr->is_none() ? attribute_path(item, attr->to_str()) : item, cs);
        if (std::none_of(seen.begin(), seen.end(),
                         [&](const Value& s) { return values_equal(s, k); })) {
          seen.push_back(k);
          out.push_back(item);
        }
      }
      return Value::iterator(std::move(out));
    };
    f["map"] = [](const Value& v, const CallArgs& a) {
      List out;
      if (!v.truthy()) return Value::iterator({});  // jinja2: `if value:` before iterating
      if (const Value* attr = a.find("attribute")) {
        const Value* dflt = a.find("default");
        for (const auto& item : v.iterate()) {
          Value x = attribute_path(item, attr->to_str());
          out.push_back(x.is_undefined() && dflt ? *dflt : x);
        }
        return Value::iterator(std::move(out));
      }
      const Value* name = argument(a, 0, nullptr);
      if (!name || !name->is_string())
        fail(ErrorKind::kType, "map needs a filter name or attribute=");
      if (!has_filter(name->str()))
        fail(ErrorKind::kRuntime, "No filter named '" + name->str() + "'.");
      const CallArgs rest = shift_args(a, 1);
      for (const auto& item : v.iterate()) out.push_back(apply_filter(name->str(), item, rest));
      return Value::iterator(std::move(out));
    };
    f["select"] = [](const Value& v, const CallArgs& a) { return select(v, a, false, true); };
    f["reject"] = [](const Value& v, const CallArgs& a) { return select(v, a, false, false); };
    f["selectattr"] = [](const Value& v, const CallArgs& a) { return select(v, a, true, true); };
    f["rejectattr"] = [](const Value& v, const CallArgs& a) { return select(v, a, true, false); };
    f["indent"] = [](const Value& v, const CallArgs& a) {
      return Value::string(indent_text(v.to_str(), a));
    };
    f["batch"] = [](const Value& v, const CallArgs& a) {
      const Value* n = argument(a, 0, "linecount");
      const Value* fill_with = argument(a, 1, "fill_with");
      if (!n || n->as_int() <= 0) fail(ErrorKind::kType, "batch needs a positive size");
      List out, cur;
      for (const auto& item : v.iterate()) {
        cur.push_back(item);
        if (static_cast<std::int64_t>(cur.size()) == n->as_int())
          out.push_back(Value::list(std::move(cur))), cur.clear();
      }
      if (!cur.empty()) {
        while (fill_with && !fill_with->is_none() &&
               static_cast<std::int64_t>(cur.size()) < n->as_int())
          cur.push_back(*fill_with);
        out.push_back(Value::list(std::move(cur)));
      }
      return Value::iterator(std::move(out));
    };
    f["sum"] = [](const Value& v, const CallArgs& a) {
      const Value* attr = argument(a, 0, "attribute");
      const Value* start = argument(a, 1, "start");
      Value total = start ? *start : Value::integer(0);
      for (const auto& item : v.iterate()) {
        total = binary_op("+", total,
                          attr && !attr->is_none() ? attribute_path(item, attr->to_str()) : item);
      }
      return total;
    };
    f["min"] = [](const Value& v, const CallArgs& a) { return min_max(v, a, false); };
    f["max"] = [](const Value& v, const CallArgs& a) { return min_max(v, a, true); };
    f["attr"] = [](const Value& v, const CallArgs& a) {
      const Value* name = argument(a, 0, "name");
      if (!name) fail(ErrorKind::kType, "attr needs a name");
      // Python attributes only (no item fallback): a dict's methods, a namespace's attributes.
      if (v.is_dict()) {
        Value m = get_attribute(Value::dict(), name->to_str());
        if (!m.is_callable() && m.undefined_kind() != ErrorKind::kSecurity) {
          return Value::undefined("'dict object' has no attribute '" + name->to_str() + "'");
        }
        return get_attribute(v, name->to_str());
      }
      return get_attribute(v, name->to_str());
    };
    f["format"] = [](const Value& v, const CallArgs& a) {
      return binary_op("%", Value::string(v.to_str()),
                       a.positional.size() == 1 ? a.positional[0] : Value::tuple(a.positional));
    };
    f["center"] = [](const Value& v, const CallArgs& a) {
      const std::string s = v.to_str();
      const Value* w = argument(a, 0, "width");
      const std::int64_t width = w ? w->as_int() : 80;
      const std::int64_t len = utf8_length(s);
      if (len >= width) return Value::string(s);
      const std::int64_t total = width - len;
      const std::int64_t left = total / 2 + (total & width & 1);
      return Value::string(std::string(static_cast<std::size_t>(left), ' ') + s +
                           std::string(static_cast<std::size_t>(total - left), ' '));
    };
    return f;
  }();
  return table;
}

}  // namespace

bool has_filter(const std::string& name) { return filters().count(name) != 0; }

Value apply_filter(const std::string& name, const Value& value, const CallArgs& args) {
  const auto it = filters().find(name);
  if (it == filters().end()) fail(ErrorKind::kRuntime, "No filter named '" + name + "'.");
  return it->second(value, args);
}

}  // namespace lft::data::jinja
