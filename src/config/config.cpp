// Location and the Config accessors. Parsing is in parse.cpp, validation in validate.cpp/rules.cpp.
#include "lft/config/config.h"

#include <stdexcept>
#include <string>
#include <variant>

#include "internal.h"

namespace lft::config {

std::string Location::str() const {
  if (file == detail::kCommandLine) {
    return "command-line argument " + std::to_string(line) + " '" + line_text + "'";
  }
  std::string out = file;
  if (line > 0) {
    out += ":" + std::to_string(line);
    if (column > 0) out += ":" + std::to_string(column);
  }
  return out;
}

bool Config::is_set(const std::string& path) const { return entries_.count(path) != 0; }

bool Config::has_table(const std::string& table) const {
  const std::string prefix = table + ".";
  auto it = entries_.lower_bound(prefix);
  return it != entries_.end() && it->first.compare(0, prefix.size(), prefix) == 0;
}

const Value& Config::value_of(const std::string& path, ValueType expected) const {
  const KeySpec* spec = find_key(path);
  if (spec == nullptr) throw std::logic_error("config: key '" + path + "' is not declared");
  if (spec->type != expected) {
    throw std::logic_error("config: key '" + path + "' is " + type_name(spec->type) + ", read as " +
                           type_name(expected));
  }
  auto it = entries_.find(path);
  if (it != entries_.end()) return it->second.value;
  if (spec->default_value) return *spec->default_value;
  throw std::logic_error("config: key '" + path + "' has no value and no default (check is_set)");
}

bool Config::boolean(const std::string& path) const {
  return std::get<bool>(value_of(path, ValueType::Bool));
}

std::int64_t Config::integer(const std::string& path) const {
  return std::get<std::int64_t>(value_of(path, ValueType::Int));
}

double Config::real(const std::string& path) const {
  return std::get<double>(value_of(path, ValueType::Float));
}

const std::string& Config::string(const std::string& path) const {
  return std::get<std::string>(value_of(path, ValueType::String));
}

std::vector<std::string> Config::strings(const std::string& path) const {
  return split_list(string(path));
}

const Location* Config::location(const std::string& path) const {
  auto it = entries_.find(path);
  return it == entries_.end() ? nullptr : &it->second.location;
}

std::string Config::where(const std::string& path) const {
  if (const Location* loc = location(path)) return loc->str() + ": key '" + path + "'";
  const KeySpec* spec = find_key(path);
  if (spec != nullptr && spec->default_value) return "key '" + path + "' (default)";
  return "key '" + path + "' (unset)";
}

Config Config::with_global_batch(int dp_size) const {
  Config out = *this;
  if (!is_set("global_batch_size")) return out;
  const std::int64_t global = integer("global_batch_size");
  const std::int64_t micro = integer("per_device_train_batch_size");
  const std::int64_t per_step = micro * dp_size;
  if (global % per_step != 0)
    throw ConfigError("config error: " + where("global_batch_size") + ": global_batch_size = " +
                      std::to_string(global) + " is not a multiple of the data-parallel size (" +
                      std::to_string(dp_size) + ") x per_device_train_batch_size (" + std::to_string(micro) +
                      ") = " + std::to_string(per_step) +
                      "\n  hint: set global_batch_size to a multiple of " + std::to_string(per_step) +
                      ", or change micro_batch_size (per_device_train_batch_size) or the number of ranks");
  out.entries_["gradient_accumulation_steps"] = Entry{Value{global / per_step}, *location("global_batch_size")};
  return out;
}

}  // namespace lft::config
