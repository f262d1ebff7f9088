// Look-ups and formatting over the key table (schema_keys.cpp).
#include "lft/config/schema.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "internal.h"
#include "lft/config/config.h"

namespace lft::config {

const KeySpec* find_key(const std::string& path) {
  for (const KeySpec& spec : schema()) {
    if (spec.path == path) return &spec;
  }
  return nullptr;
}

const std::vector<EngineCapabilities>& engine_capabilities() {
  // name, float8, float8_all_gather, offload, deepspeed_config, sequence_parallel
  static const std::vector<EngineCapabilities> engines = {
      {"none", true, false, false, false, false},       {"ddp", true, false, false, false, false},
      {"fsdp", false, false, false, false, false},      {"fsdp2", true, true, true, false, false},
      {"deepspeed", false, false, true, true, false},   {"megatron", true, true, true, false, true},
  };
  return engines;
}

const EngineCapabilities& capabilities_of(const std::string& engine) {
  for (const EngineCapabilities& e : engine_capabilities())
    if (e.name == engine) return e;
  throw std::logic_error("no capabilities declared for engine '" + engine + "'");
}

std::string engines_with(bool EngineCapabilities::*capability) {
  std::vector<std::string> names;
  for (const EngineCapabilities& e : engine_capabilities())
    if (e.*capability) names.push_back(e.name);
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return out;
}

const std::vector<std::string>& engine_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const EngineCapabilities& e : engine_capabilities()) out.push_back(e.name);
    return out;
  }();
  return names;
}

std::vector<std::string> split_list(const std::string& joined) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t end = joined.find('\n', start);
    out.push_back(joined.substr(start, end - start));
    if (end == std::string::npos) return out;
    start = end + 1;
  }
}

const char* type_name(ValueType type) {
  switch (type) {
    case ValueType::Bool:
      return "bool";
    case ValueType::Int:
      return "int";
    case ValueType::Float:
      return "float";
    case ValueType::String:
      return "string";
  }
  return "?";
}

namespace {

// The shortest text that reads back as exactly `v`.
std::string shortest(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[64];
  int precision = 1;
  for (; precision < 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  // Plain digits for ordinary magnitudes: 600 rather than 6e+02.
  const double exponent = v == 0 ? 0 : std::floor(std::log10(std::fabs(v)));
  if (exponent >= 0 && exponent < 17)
    precision = std::max(precision, static_cast<int>(exponent) + 1);
  std::snprintf(buf, sizeof buf, "%.*g", precision, v);
  return buf;
}

std::string toml_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

}  // namespace

// TOML spelling: true, 42, 5e-05, 600.0, "text".
std::string format_value(const Value& value) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>) {
          return v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, std::int64_t>) {
          return std::to_string(v);
        } else if constexpr (std::is_same_v<T, double>) {
          std::string s = shortest(v);
          if (s.find_first_of(".eni") == std::string::npos) s += ".0";
          return s;
        } else {
          return toml_string(v);
        }
      },
      value);
}

namespace detail {

RangeKind range_kind(const KeySpec& spec) {
  if (spec.path.rfind("mesh.", 0) == 0) return RangeKind::MeshDim;
  if (spec.path == "comm_timeout" || spec.path == "setup_timeout" ||
      spec.path == "ddp_bucket_cap_mb") {
    return RangeKind::Positive;
  }
  return RangeKind::Plain;
}

bool in_range(const KeySpec& spec, double v) {
  switch (range_kind(spec)) {
    case RangeKind::MeshDim:
      return v >= 1 || v == -1;
    case RangeKind::Positive:
      return v > 0;
    case RangeKind::Plain:
      break;
  }
  if (std::isnan(v)) return !spec.min && !spec.max;
  if (spec.min && v < *spec.min) return false;
  if (spec.max && v > *spec.max) return false;
  return true;
}

std::string format_number(double v) { return shortest(v); }

std::string range_text(const KeySpec& spec) {
  switch (range_kind(spec)) {
    case RangeKind::MeshDim:
      return ">= 1, or -1 to fill";
    case RangeKind::Positive:
      return "> 0";
    case RangeKind::Plain:
      break;
  }
  if (spec.min && spec.max) {
    return "between " + format_number(*spec.min) + " and " + format_number(*spec.max);
  }
  if (spec.min) return ">= " + format_number(*spec.min);
  if (spec.max) return "<= " + format_number(*spec.max);
  return "";
}

std::string type_with_article(ValueType type) {
  return std::string(type == ValueType::Int ? "an " : "a ") + type_name(type);
}

std::string quoted_list(const std::vector<std::string>& values) {
  std::string out;
  for (const std::string& v : values) {
    if (!out.empty()) out += ", ";
    out += '"' + v + '"';
  }
  return out;
}

const std::vector<std::string>& table_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const KeySpec& spec : schema()) {
      std::size_t dot = spec.path.find('.');
      if (dot == std::string::npos) continue;
      std::string table = spec.path.substr(0, dot);
      if (std::find(out.begin(), out.end(), table) == out.end()) out.push_back(table);
    }
    return out;
  }();
  return names;
}

bool is_table_name(const std::string& name) {
  const auto& names = table_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  const std::size_t limit = word.size() <= 4 ? 1 : std::max<std::size_t>(2, word.size() / 3);
  auto common_prefix = [&](const std::string& c) {
    std::size_t n = 0;
    while (n < c.size() && n < word.size() && c[n] == word[n]) ++n;
    return n;
  };
  // Smallest distance; on a tie the longest common prefix ("mesh.tpp": mesh.tp, not mesh.pp).
  std::string best;
  std::size_t best_distance = limit + 1;
  std::size_t best_prefix = 0;
  for (const std::string& c : candidates) {
    const std::size_t d = edit_distance(word, c);
    const std::size_t prefix = common_prefix(c);
    if (d < best_distance || (d == best_distance && prefix > best_prefix)) {
      best = c;
      best_distance = d;
      best_prefix = prefix;
    }
  }
  return best;
}

std::string suggest_key(const std::string& path, bool as_table) {
  if (as_table) return nearest(path, table_names());
  std::vector<std::string> paths;
  for (const KeySpec& spec : schema()) paths.push_back(spec.path);
  std::string best = nearest(path, paths);
  if (!best.empty() && edit_distance(path, best) <= 1) return best;
  // The right name in the wrong table ("tp" for "mesh.tp", "[mesh] seed" for "seed").
  const std::string leaf = path.substr(path.rfind('.') + 1);
  for (const KeySpec& spec : schema()) {
    if (spec.path != path && spec.path.substr(spec.path.rfind('.') + 1) == leaf) return spec.path;
  }
  return best;
}

}  // namespace detail
}  // namespace lft::config
