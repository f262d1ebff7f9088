#include "lft/plan/cluster.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <toml.hpp>
#include <utility>
#include <vector>

#include "lft/config/config.h"

namespace lft::plan {
namespace {

using config::ConfigError;

enum class Kind { Text, Backend, Count, Positive, NonNegative, Fraction, Headroom, Flag };
enum class Need { Optional, Always, SeveralNodes };

// One key of [cluster], its rule and the field it fills (one of the four pointers is set).
struct KeyRule {
  const char* key = "";
  Kind kind = Kind::Text;
  Need need = Need::Optional;
  int Cluster::*count = nullptr;
  double Cluster::*number = nullptr;
  std::string Cluster::*text = nullptr;
  bool Cluster::*flag = nullptr;
};

KeyRule make_rule(const char* key, Kind kind, Need need) {
  KeyRule r;
  r.key = key;
  r.kind = kind;
  r.need = need;
  return r;
}
KeyRule count_key(const char* key, int Cluster::*field) {
  KeyRule r = make_rule(key, Kind::Count, Need::Always);
  r.count = field;
  return r;
}
KeyRule number_key(const char* key, Kind kind, Need need, double Cluster::*field) {
  KeyRule r = make_rule(key, kind, need);
  r.number = field;
  return r;
}
KeyRule text_key(const char* key, Kind kind, std::string Cluster::*field) {
  KeyRule r = make_rule(key, kind, Need::Optional);
  r.text = field;
  return r;
}
KeyRule flag_key(const char* key, bool Cluster::*field) {
  KeyRule r = make_rule(key, Kind::Flag, Need::Optional);
  r.flag = field;
  return r;
}

const std::vector<KeyRule>& key_rules() {
  static const std::vector<KeyRule> rules = {
      text_key("name", Kind::Text, &Cluster::name),
      count_key("nodes", &Cluster::nodes),
      count_key("devices_per_node", &Cluster::devices_per_node),
      number_key("device_memory_gib", Kind::Positive, Need::Always, &Cluster::device_memory_gib),
      number_key("device_tflops", Kind::Positive, Need::Always, &Cluster::device_tflops),
      number_key("mfu_ceiling", Kind::Fraction, Need::Optional, &Cluster::mfu_ceiling),
      number_key("intra_node_gbps", Kind::Positive, Need::Always, &Cluster::intra_node_gbps),
      number_key("intra_node_latency_us", Kind::NonNegative, Need::Always, &Cluster::intra_node_latency_us),
      number_key("inter_node_gbps", Kind::Positive, Need::SeveralNodes, &Cluster::inter_node_gbps),
      number_key("inter_node_latency_us", Kind::NonNegative, Need::SeveralNodes, &Cluster::inter_node_latency_us),
      number_key("memory_headroom", Kind::Headroom, Need::Optional, &Cluster::memory_headroom),
      text_key("backend", Kind::Backend, &Cluster::backend),
      flag_key("overlap_comm", &Cluster::overlap_comm),
  };
  return rules;
}

const KeyRule* find_rule(const std::string& key) {
  for (const KeyRule& r : key_rules())
    if (key == r.key) return &r;
  return nullptr;
}

std::string allowed(Kind kind) {
  switch (kind) {
    case Kind::Text:
      return "a string";
    case Kind::Backend:
      return "\"nccl\" or \"mpi\"";
    case Kind::Count:
      return "an integer >= 1";
    case Kind::Positive:
      return "a number > 0";
    case Kind::NonNegative:
      return "a number >= 0";
    case Kind::Fraction:
      return "a number > 0 and <= 1";
    case Kind::Headroom:
      return "a number >= 0 and < 1";
    case Kind::Flag:
      return "true or false";
  }
  return "";
}

std::string type_name(const toml::value& v) {
  switch (v.type()) {
    case toml::value_t::boolean:
      return "a boolean";
    case toml::value_t::integer:
      return "an integer";
    case toml::value_t::floating:
      return "a float";
    case toml::value_t::string:
      return "a string";
    case toml::value_t::array:
      return "an array";
    case toml::value_t::table:
      return "a table";
    default:
      return "a date/time";
  }
}

// Every problem of the file, thrown together as one ConfigError (as parse_config reports a run
// config): "config error: FILE:LINE:COL: key 'cluster.x': what", the quoted line, a hint.
class Problems {
 public:
  explicit Problems(std::string file) : file_(std::move(file)) {}

  void add(const toml::value* at, const std::string& key, const std::string& what, const std::string& hint) {
    std::string where = file_, quoted;
    int line_number = 0;
    const toml::source_location src = at != nullptr ? at->location() : toml::source_location();
    const std::string line = src.line_str();
    if (at != nullptr && !line.empty()) {  // a value without a region in the source: the file alone
      const std::size_t leaf = line.find(key.substr(key.rfind('.') + 1));
      const std::size_t column = leaf == std::string::npos ? static_cast<std::size_t>(src.column()) : leaf + 1;
      line_number = static_cast<int>(src.line());
      where += ":" + std::to_string(line_number) + ":" + std::to_string(column);
      quoted = "  " + std::to_string(line_number) + " | " + line + "\n";
    }
    messages_.emplace_back(
        line_number, "config error: " + where + ": key '" + key + "': " + what + "\n" + quoted + "  hint: " + hint);
  }

  // In file order (toml11 hands the keys of a table over unordered).
  void throw_if_any() {
    if (messages_.empty()) return;
    std::stable_sort(messages_.begin(), messages_.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    if (messages_.size() == 1) throw ConfigError(messages_.front().second);
    std::string all;
    for (const auto& m : messages_) all += m.second + "\n";
    throw ConfigError(all + std::to_string(messages_.size()) + " config errors; fix them all and run again");
  }

 private:
  std::string file_;
  std::vector<std::pair<int, std::string>> messages_;  // (line, message)
};

std::string known_keys() {
  std::string out;
  for (const KeyRule& r : key_rules()) out += (out.empty() ? "" : ", ") + std::string(r.key);
  return out;
}

std::string unknown_key_hint(const std::string& key) {
  std::string best;
  std::size_t best_distance = 3;  // suggest only close names
  for (const KeyRule& r : key_rules()) {
    const std::size_t d = lft::edit_distance(key, r.key);
    if (d < best_distance) {
      best_distance = d;
      best = r.key;
    }
  }
  if (!best.empty()) return "did you mean 'cluster." + best + "'? (docs/plan.md lists the keys)";
  return "the keys of [cluster] are " + known_keys() + " (docs/plan.md)";
}

bool number_of(const toml::value& v, double& out) {
  if (v.is_floating())
    out = v.as_floating();
  else if (v.is_integer())
    out = static_cast<double>(v.as_integer());
  else
    return false;
  return true;
}

bool in_range(Kind kind, double x) {
  switch (kind) {
    case Kind::Positive:
      return x > 0;
    case Kind::NonNegative:
      return x >= 0;
    case Kind::Fraction:
      return x > 0 && x <= 1;
    case Kind::Headroom:
      return x >= 0 && x < 1;
    default:
      return true;
  }
}

// Reads `v` into the field of `rule`; a wrong type or range is a problem at the key.
void read_value(const KeyRule& rule, const toml::value& v, Cluster& c, Problems& problems) {
  const std::string key = std::string("cluster.") + rule.key;
  const std::string expected = "expected " + allowed(rule.kind) + ", got " + type_name(v);
  const std::string hint = "write e.g. " + std::string(rule.key) + " = " +
                           (rule.kind == Kind::Text      ? "\"my-cluster\""
                            : rule.kind == Kind::Backend ? "\"nccl\""
                            : rule.kind == Kind::Count   ? "8"
                            : rule.kind == Kind::Flag    ? "true"
                                                         : "0.5");
  switch (rule.kind) {
    case Kind::Text:
    case Kind::Backend: {
      if (!v.is_string()) return problems.add(&v, key, expected, hint);
      const std::string s = v.as_string().str;
      if (rule.kind == Kind::Backend && s != "nccl" && s != "mpi")
        return problems.add(&v, key, "'" + s + "' is not a backend; allowed: " + allowed(rule.kind),
                            "\"nccl\" for GPUs, \"mpi\" for CPU ranks (16-bit reductions then travel as fp32)");
      c.*rule.text = s;
      return;
    }
    case Kind::Count: {
      if (!v.is_integer()) return problems.add(&v, key, expected, hint);
      const auto n = v.as_integer();
      if (n < 1 || n > 1000000)
        return problems.add(&v, key, std::to_string(n) + " is out of range: " + allowed(rule.kind), hint);
      c.*rule.count = static_cast<int>(n);
      return;
    }
    case Kind::Flag: {
      if (!v.is_boolean()) return problems.add(&v, key, expected, hint);
      c.*rule.flag = v.as_boolean();
      return;
    }
    default: {
      double x = 0;
      if (!number_of(v, x)) return problems.add(&v, key, expected, hint);
      if (!in_range(rule.kind, x)) {
        char shown[64];
        std::snprintf(shown, sizeof shown, "%g", x);
        return problems.add(&v, key, std::string(shown) + " is out of range: " + allowed(rule.kind), hint);
      }
      c.*rule.number = x;
      return;
    }
  }
}

// "inputs/clusters/h100-8x8.toml" -> "h100-8x8"
std::string stem(const std::string& path) {
  std::string base = path.substr(path.find_last_of('/') + 1);
  const std::size_t dot = base.rfind('.');
  return dot == std::string::npos || dot == 0 ? base : base.substr(0, dot);
}

std::string number(double x, const char* format) {
  char text[64];
  std::snprintf(text, sizeof text, format, x);
  return text;
}

}  // namespace

double Cluster::usable_memory_bytes() const {
  return device_memory_gib * 1024.0 * 1024.0 * 1024.0 * (1.0 - memory_headroom);
}

std::string Cluster::summary() const {
  std::string out = name + ": " + std::to_string(nodes) + " node(s) x " + std::to_string(devices_per_node) +
                    " device(s) = " + std::to_string(world_size()) + " ranks; " + number(device_memory_gib, "%g") +
                    " GiB (" + number(100 * memory_headroom, "%g") + "% kept free), " + number(device_tflops, "%g") +
                    " TFLOP/s x " + number(mfu_ceiling, "%.2f") + " per device; in a node " +
                    number(intra_node_gbps, "%g") + " GB/s + " + number(intra_node_latency_us, "%g") + " us";
  if (nodes > 1)
    out +=
        ", between nodes " + number(inter_node_gbps, "%g") + " GB/s + " + number(inter_node_latency_us, "%g") + " us";
  return out + "; " + backend + (overlap_comm ? "" : ", no overlap of communication with compute");
}

Cluster parse_cluster(const std::string& text, const std::string& file_name) {
  toml::value root;
  try {
    std::istringstream is(text);
    root = toml::parse(is, file_name);
  } catch (const std::exception& e) {
    throw ConfigError("config error: " + file_name + ": TOML syntax error\n" + e.what());
  }
  Problems problems(file_name);
  const toml::value* table = nullptr;
  for (const auto& [key, v] : root.as_table()) {
    if (key == "cluster" && v.is_table())
      table = &v;
    else if (key == "cluster")
      problems.add(&v, key, "expected a table [cluster], got " + type_name(v),
                   "write [cluster] on a line of its own, the keys below it");
    else
      problems.add(&v, key, "unknown key: a cluster file holds one table, [cluster]",
                   "move the key under [cluster] (docs/plan.md lists the keys)");
  }
  if (table == nullptr) {
    problems.add(nullptr, "cluster", "missing table [cluster]", "see inputs/clusters/h100-8x8.toml for an example");
    problems.throw_if_any();
  }
  Cluster c;
  c.name = stem(file_name);
  std::map<std::string, bool> given;
  for (const auto& [key, v] : table->as_table()) {
    const KeyRule* rule = find_rule(key);
    if (rule == nullptr) {
      problems.add(&v, "cluster." + key, "unknown key", unknown_key_hint(key));
      continue;
    }
    given[key] = true;
    read_value(*rule, v, c, problems);
  }
  for (const KeyRule& r : key_rules()) {
    const bool needed = r.need == Need::Always || (r.need == Need::SeveralNodes && c.nodes > 1);
    if (needed && given.count(r.key) == 0)
      problems.add(table, std::string("cluster.") + r.key, "missing required key (" + allowed(r.kind) + ")",
                   "add it under [cluster]; docs/plan.md says what it means");
  }
  problems.throw_if_any();
  return c;
}

Cluster read_cluster(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw ConfigError("config error: cannot read cluster file '" + path + "': " + std::strerror(errno) +
                      "\n  hint: give the path of a cluster TOML file, e.g. `lftrain --plan "
                      "inputs/clusters/h100-8x8.toml inputs/plan/llama3-8b.toml`");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_cluster(text.str(), path);
}

}  // namespace lft::plan
