// parse_config: TOML or YAML text + key=value overrides -> flat, located items -> validated Config.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <sstream>
#include <string>
#include <toml.hpp>
#include <tuple>
#include <vector>

#include "internal.h"
#include "lft/config/config.h"

namespace lft::config {
namespace {

using detail::Input;
using detail::Item;
using detail::ItemKind;

using detail::kCommandLine;

// toml11 parses nested arrays and inline tables recursively: a value nested tens of thousands
// deep overflowed the stack. The nesting is counted first, in one pass outside strings and
// comments.
constexpr int kMaxTomlNesting = 128;

// The index just past the string that opens at `i` (quote `q`; ''' and """ span lines), counting
// the newlines it holds into `line`.
std::size_t skip_toml_string(const std::string& text, std::size_t i, int& line) {
  const char q = text[i];
  const bool multi = text.compare(i, 3, std::string(3, q)) == 0;
  std::size_t j = i + (multi ? 3 : 1);
  for (; j < text.size(); ++j) {
    if (text[j] == '\n') {
      if (!multi) return j;  // an unclosed string: toml11 reports it
      ++line;
    } else if (text[j] == '\\' && q == '"') {
      ++j;
    } else if (text[j] == q && (!multi || text.compare(j, 3, std::string(3, q)) == 0)) {
      return j + (multi ? 3 : 1);
    }
  }
  return j;
}

void check_toml_nesting(const std::string& text, const std::string& file) {
  int depth = 0, line = 1;
  std::size_t line_start = 0;
  for (std::size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      line_start = ++i;
    } else if (c == '#') {
      i = std::min(text.find('\n', i), text.size());
    } else if (c == '"' || c == '\'') {
      const int before = line;
      i = skip_toml_string(text, i, line);
      if (line != before) line_start = text.rfind('\n', i - 1) + 1;
    } else {
      if ((c == '[' || c == '{') && ++depth > kMaxTomlNesting) {
        Location loc;
        loc.file = file;
        loc.line = line;
        loc.column = static_cast<int>(i - line_start) + 1;
        detail::fail(file, &loc, "values nested more than " + std::to_string(kMaxTomlNesting) + " levels deep",
                     "a config nests a table or a list a few levels at most");
      }
      if ((c == ']' || c == '}') && depth > 0) --depth;
      ++i;
    }
  }
}


std::string trim(const std::string& s) {
  const char* ws = " \t\r\n";
  std::size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

// Where a TOML value sits. toml11 points at the value ("lr = 1e-4" -> column 6); for a key/value
// line we point at the key instead, which is what the user reads and edits.
// toml11 counts the newlines before a value each time its location is asked for, which made a
// file of n keys cost O(n^2); this looks lines up in an index of the source's newlines instead.
class LineIndex {
 public:
  // Line (1-based), column (1-based) and text of the line holding byte `offset` of `source`.
  void locate(const std::vector<char>& source, std::size_t offset, Location& loc) {
    if (&source != indexed_) {
      indexed_ = &source;
      newlines_.clear();
      for (std::size_t i = 0; i < source.size(); ++i)
        if (source[i] == '\n') newlines_.push_back(i);
    }
    const auto before = std::lower_bound(newlines_.begin(), newlines_.end(), offset);
    const std::size_t begin = before == newlines_.begin() ? 0 : *std::prev(before) + 1;
    const std::size_t end = before == newlines_.end() ? source.size() : *before;
    loc.line = static_cast<int>(before - newlines_.begin()) + 1;
    loc.column = static_cast<int>(offset - begin) + 1;
    loc.line_text.assign(source.begin() + static_cast<std::ptrdiff_t>(begin),
                         source.begin() + static_cast<std::ptrdiff_t>(end));
  }

 private:
  const std::vector<char>* indexed_ = nullptr;
  std::vector<std::size_t> newlines_;
};

Location location_of(const toml::value& v, const std::string& path, LineIndex& lines) {
  Location loc;
  const auto* region = dynamic_cast<const toml::detail::region*>(toml::detail::get_region(v));
  if (region != nullptr && region->source()) {
    loc.file = region->name();
    lines.locate(*region->source(), static_cast<std::size_t>(region->first() - region->begin()), loc);
  } else {
    const toml::source_location src = v.location();
    loc.file = src.file_name();
    loc.line = static_cast<int>(src.line());
    loc.column = static_cast<int>(src.column());
    loc.line_text = src.line_str();
  }
  const std::string stripped = trim(loc.line_text);
  const bool header = !stripped.empty() && stripped[0] == '[';
  if (!header && loc.column > 1) {
    const std::string leaf = path.substr(path.rfind('.') + 1);
    // toml11 points at the value, or (for some dotted keys) at the leaf key itself.
    std::size_t pos = loc.line_text.compare(loc.column - 1, leaf.size(), leaf) == 0
                          ? static_cast<std::size_t>(loc.column - 1)
                          : loc.line_text.substr(0, loc.column - 1).rfind(leaf);
    if (pos != std::string::npos) {
      // Back to the start of a dotted or quoted key: "mesh.tp = 2" -> column 1.
      auto in_key = [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ||
               c == '"' || c == '\'';
      };
      while (pos > 0 && in_key(loc.line_text[pos - 1])) --pos;
      loc.column = static_cast<int>(pos) + 1;
    }
  }
  return loc;
}

// Flattens `v` (found at dotted `path`) into items. `forced` (overrides) replaces toml locations.
void flatten(const toml::value& v, const std::string& path, const Location* forced,
             std::vector<Item>& out, std::map<std::string, Location>& tables, LineIndex& lines) {
  Location loc = forced != nullptr ? *forced : path.empty() ? Location{} : location_of(v, path, lines);
  Item item;
  item.path = path;
  item.loc = loc;
  switch (v.type()) {
    case toml::value_t::table: {
      if (!path.empty() && (find_key(path) != nullptr || !detail::is_table_name(path))) {
        // A table where a value is expected, or a table nobody declared.
        item.kind = ItemKind::Table;
        out.push_back(item);
        return;
      }
      if (!path.empty()) tables.emplace(path, loc);
      for (const auto& [key, child] : v.as_table()) {
        flatten(child, path.empty() ? key : path + "." + key, forced, out, tables, lines);
      }
      return;
    }
    case toml::value_t::array: {
      const KeySpec* spec = find_key(path);
      const auto& elements = v.as_array();
      const bool strings = !elements.empty() &&
          std::all_of(elements.begin(), elements.end(), [](const toml::value& e) { return e.is_string(); });
      if (spec == nullptr || !spec->list || !strings) {
        item.kind = ItemKind::Array;
        break;
      }
      std::string joined;
      for (const auto& e : elements) joined += (joined.empty() ? "" : "\n") + e.as_string().str;
      item.value = joined;
      break;
    }
    case toml::value_t::offset_datetime:
    case toml::value_t::local_datetime:
    case toml::value_t::local_date:
    case toml::value_t::local_time:
      item.kind = ItemKind::DateTime;
      break;
    case toml::value_t::boolean:
      item.value = v.as_boolean();
      break;
    case toml::value_t::integer:
      item.value = static_cast<std::int64_t>(v.as_integer());
      break;
    case toml::value_t::floating:
      item.value = static_cast<double>(v.as_floating());
      break;
    case toml::value_t::string:
      item.value = v.as_string().str;
      break;
    default:
      return;  // value_t::empty does not occur in parsed input
  }
  out.push_back(item);
}

bool before(const Item& a, const Item& b) {
  return std::tie(a.loc.line, a.loc.column, a.path) < std::tie(b.loc.line, b.loc.column, b.path);
}

// One "key=value" argument (1-based `index`) -> items.
std::vector<Item> parse_override(const std::string& file, const std::string& arg, int index,
                                 std::map<std::string, Location>& tables) {
  Location loc{kCommandLine, index, 0, arg};
  const std::size_t eq = arg.find('=');
  if (eq == std::string::npos) {
    detail::fail(file, &loc, "expected key=value, got '" + arg + "'",
                 "command-line overrides look like learning_rate=1e-4 or mesh.tp=2");
  }
  const std::string key = trim(arg.substr(0, eq));
  const std::string raw = trim(arg.substr(eq + 1));
  if (key.empty()) {
    detail::fail(file, &loc, "no key before '=' in '" + arg + "'",
                 "command-line overrides look like learning_rate=1e-4 or mesh.tp=2");
  }
  std::vector<Item> out;
  const KeySpec* spec = find_key(key);
  const bool list_value = spec != nullptr && spec->list && !raw.empty() && raw.front() == '[';
  if (spec == nullptr || spec->type != ValueType::String || list_value) {
    try {
      check_toml_nesting("v = " + raw, kCommandLine);
      std::istringstream is("v = " + raw);
      const toml::value parsed = toml::parse(is, kCommandLine);
      if (parsed.is_table() && parsed.as_table().size() == 1 && parsed.contains("v")) {
        LineIndex lines;
        flatten(parsed.at("v"), key, &loc, out, tables, lines);
        return out;
      }
    } catch (const std::exception&) {
      // Not a TOML value: read it as a bare string below.
    }
  } else if (raw.size() >= 2 && (raw.front() == '"' || raw.front() == '\'')) {
    try {  // a quoted string for a string key: take TOML's reading of the quotes
      std::istringstream is("v = " + raw);
      const toml::value parsed = toml::parse(is, kCommandLine);
      if (parsed.as_table().size() == 1 && parsed.at("v").is_string()) {
        Item item{key, ItemKind::Scalar, parsed.at("v").as_string().str, loc, 0};
        return {item};
      }
    } catch (const std::exception&) {
    }
  }
  out.push_back(Item{key, ItemKind::Scalar, raw, loc, 0});
  return out;
}

}  // namespace

Config parse_config(const std::string& text, const std::string& file_name,
                    const std::vector<std::string>& overrides) {
  Input in;
  in.file = file_name;

  in.yaml = detail::is_yaml_file(file_name);
  if (in.yaml) {
    detail::flatten_yaml(text, file_name, in);
  } else {
    check_toml_nesting(text, file_name);
    toml::value root;
    try {
      std::istringstream is(text);
      root = toml::parse(is, file_name);
    } catch (const std::exception& e) {
      throw ConfigError(file_name + ": TOML syntax error\n" + e.what() +
                        "\n  hint: lftrain reads .yaml/.yml files as YAML and every other file as TOML");
    }
    LineIndex lines;
    flatten(root, "", nullptr, in.items, in.tables, lines);
  }
  std::sort(in.items.begin(), in.items.end(), before);

  for (std::size_t i = 0; i < overrides.size(); ++i) {
    for (Item& item : parse_override(file_name, overrides[i], static_cast<int>(i) + 1, in.tables)) {
      in.items.erase(std::remove_if(in.items.begin(), in.items.end(),
                                    [&](const Item& old) { return old.path == item.path; }),
                     in.items.end());
      in.items.push_back(std::move(item));
    }
  }
  for (std::size_t i = 0; i < in.items.size(); ++i) {
    Item& item = in.items[i];
    item.order = static_cast<int>(i);
    const std::size_t dot = item.path.find('.');
    if (dot != std::string::npos && detail::is_table_name(item.path.substr(0, dot))) {
      in.tables.emplace(item.path.substr(0, dot), item.loc);  // e.g. model.x=1 on the command line
    }
  }

  detail::Problems problems;
  in.v1 = detail::is_v1_config(in);
  if (in.v1) detail::apply_v1_keys(in, problems);
  detail::apply_llamafactory_keys(in, problems);
  detail::check_items(in, problems);
  detail::check_engines(in, problems);
  if (problems.empty()) detail::check_rules(in, problems);  // rules read keys that passed their checks
  detail::check_paths(in, problems);
  problems.throw_if_any();

  Config config;
  config.source_name_ = file_name;
  config.source_text_ = text;
  config.overrides_ = overrides;
  config.notes_ = in.notes;
  config.format_ = !in.yaml ? "lftrain TOML" : in.v1 ? in.format : "a LlamaFactory (classic trainer) YAML";
  for (const auto& [path, checked] : in.entries) {
    config.entries_[path] = Config::Entry{checked.value, checked.loc};
  }
  return config;
}

}  // namespace lft::config
