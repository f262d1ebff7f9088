// A YAML config (LlamaFactory's format) -> the same flat, located items as a TOML one.
//
// Scalars are typed as LlamaFactory's loader (OmegaConf over PyYAML) types them: quoted ->
// string; true/false/yes/no/on/off -> bool; integers; floats including 1e-5 (which plain YAML
// 1.1 would leave a string); null, ~ or nothing -> the key is absent. A sequence of scalars is a
// list, a mapping a table.
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "internal.h"

namespace lft::config::detail {
namespace {

// YAML 1.1's scalars as LlamaFactory's loader types them, scanned in one pass (std::regex
// recurses per character and overflowed the stack on a value of ~50,000 characters).
bool is_yaml_bool(const std::string& s) {
  static const char* const kWords[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON",
                                       "false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"};
  for (const char* w : kWords)
    if (s == w) return true;
  return false;
}

std::size_t skip_digits(const std::string& s, std::size_t i) {
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  return i;
}

std::size_t skip_sign(const std::string& s, std::size_t i) {
  return i < s.size() && (s[i] == '-' || s[i] == '+') ? i + 1 : i;
}

// [-+]?[0-9]+
bool is_integer(const std::string& s) {
  const std::size_t start = skip_sign(s, 0), end = skip_digits(s, start);
  return end > start && end == s.size();
}

// [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
bool is_float(const std::string& s) {
  std::size_t i = skip_sign(s, 0);
  if (i < s.size() && s[i] == '.') {
    const std::size_t end = skip_digits(s, i + 1);
    if (end == i + 1) return false;
    i = end;
  } else {
    const std::size_t end = skip_digits(s, i);
    if (end == i) return false;
    i = end;
    if (i < s.size() && s[i] == '.') i = skip_digits(s, i + 1);
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    const std::size_t digits = skip_sign(s, i + 1), end = skip_digits(s, digits);
    if (end == digits) return false;
    i = end;
  }
  return i == s.size();
}

// The 1-based line of the last '---' line at or before line `at` (-1: anywhere): where a document
// whose content starts at `at` opens.
int document_marker_before(const std::string& text, int at) {
  int line = 1, found = 0;
  for (std::size_t start = 0; start < text.size() && (at < 0 || line <= at); ++line) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    if (text.compare(start, 3, "---") == 0) found = line;
    start = end + 1;
  }
  return found;
}

class YamlReader {
 public:
  YamlReader(const std::string& text, const std::string& file, Input& in) : file_(file), in_(in) {
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) lines_.push_back(line);
  }

  void read_mapping(const YAML::Node& map, const std::string& prefix) {
    for (auto it = map.begin(); it != map.end(); ++it) {
      const std::string key = it->first.Scalar();
      const std::string path = prefix.empty() ? key : prefix + "." + key;
      const Location loc = location(it->first.Mark());
      const auto [seen, fresh] = seen_.emplace(path, loc);
      if (!fresh)
        fail(file_, &loc, "key '" + path + "' appears twice (also on line " +
                              std::to_string(seen->second.line) + ")",
             "keep one of them");
      read_value(it->second, path, loc);
    }
  }

 private:
  void read_value(const YAML::Node& node, const std::string& path, const Location& loc) {
    Item item;
    item.path = path;
    item.loc = loc;
    switch (node.Type()) {
      case YAML::NodeType::Null:
      case YAML::NodeType::Undefined:
        return;  // `key: null` is the key left out, as in LlamaFactory
      case YAML::NodeType::Map:
        if (find_key(path) == nullptr && (is_table_name(path) || is_v1_plugin_table(path))) {
          in_.tables.emplace(path, loc);
          read_mapping(node, path);
          return;
        }
        item.kind = ItemKind::Table;
        break;
      case YAML::NodeType::Sequence: {
        const KeySpec* spec = find_key(path);
        std::string joined;
        bool scalars = (spec != nullptr && spec->list) || is_v1_plugin_key(path);
        for (const YAML::Node& element : node) {
          scalars = scalars && element.IsScalar();
          if (scalars) joined += (joined.empty() ? "" : "\n") + element.Scalar();  // as split_list reads it
        }
        if (scalars && node.size() == 0)
          fail(file_, &loc, "key '" + path + "' is an empty list", "name at least one, or leave the key out");
        if (scalars) {
          item.value = joined;
        } else {
          item.kind = ItemKind::Array;
        }
        break;
      }
      case YAML::NodeType::Scalar:
        item.value = typed(node, loc);
        break;
    }
    in_.items.push_back(std::move(item));
  }

  Value typed(const YAML::Node& node, const Location& loc) const {
    const std::string& s = node.Scalar();
    if (node.Tag() == "!") return s;  // quoted
    if (is_yaml_bool(s)) {
      const char c = s[0];
      return c == 't' || c == 'T' || c == 'y' || c == 'Y' || (s.size() == 2 && (s[1] == 'n' || s[1] == 'N'));
    }
    if (is_integer(s)) {
      errno = 0;
      const long long v = std::strtoll(s.c_str(), nullptr, 10);
      if (errno == ERANGE)
        fail(file_, &loc, "the integer " + (s.size() > 40 ? s.substr(0, 40) + "... (" + std::to_string(s.size()) + " digits)" : s) +
                              " is outside the 64-bit range", "use a smaller value");
      return static_cast<std::int64_t>(v);
    }
    if (is_float(s)) return std::strtod(s.c_str(), nullptr);
    return s;
  }

  Location location(const YAML::Mark& mark) const {
    Location loc;
    loc.file = file_;
    loc.line = mark.line + 1;
    loc.column = mark.column + 1;
    if (mark.line >= 0 && static_cast<std::size_t>(mark.line) < lines_.size()) loc.line_text = lines_[mark.line];
    return loc;
  }

  std::string file_;
  Input& in_;
  std::vector<std::string> lines_;
  std::map<std::string, Location> seen_;
};

}  // namespace

bool is_yaml_file(const std::string& file_name) {
  for (const char* ext : {".yaml", ".yml"}) {
    const std::string e = ext;
    if (file_name.size() >= e.size() && file_name.compare(file_name.size() - e.size(), e.size(), e) == 0)
      return true;
  }
  return false;
}

void flatten_yaml(const std::string& text, const std::string& file_name, Input& in) {
  YAML::Node root;
  try {
    const std::vector<YAML::Node> documents = YAML::LoadAll(text);
    if (documents.size() > 1) {
      // LlamaFactory's loader (yaml.safe_load) refuses a stream of several documents too.
      Location loc;
      loc.file = file_name;
      loc.line = document_marker_before(text, documents[1].Mark().line >= 0 ? documents[1].Mark().line + 1 : -1);
      loc.column = 1;
      fail(file_name, &loc,
           "a second YAML document starts here ('---'): a config is one document, and the keys after it would be lost",
           "merge the documents into one, or remove the '---' line");
    }
    if (!documents.empty()) root = documents.front();
  } catch (const YAML::ParserException& e) {
    Location loc;
    loc.file = file_name;
    loc.line = e.mark.line + 1;
    loc.column = e.mark.column + 1;
    if (const auto* deep = dynamic_cast<const YAML::DeepRecursion*>(&e))  // yaml-cpp words it "bad file"
      fail(file_name, &loc, "values nested more than " + std::to_string(deep->depth() - 1) + " levels deep",
           "a config is a mapping of keys to values and a few nested tables");
    fail(file_name, &loc, "YAML syntax error: " + e.msg,
         "lftrain reads .yaml/.yml files as YAML and every other file as TOML");
  }
  if (root.IsNull()) return;
  if (!root.IsMap())
    fail(file_name, nullptr, "a YAML config is a mapping of keys to values (key: value lines)",
         "see inputs/llamafactory/ for examples");
  YamlReader(text, file_name, in).read_mapping(root, "");
}

}  // namespace lft::config::detail
