// HfConfigReader: typed config.json fields with messages that name the file and the field.
#include "lft/model/hf_config_reader.h"

#include <cmath>
#include <cstdint>

#include "lft/config/config.h"

namespace lft::model {

using Json = nlohmann::json;

void config_field_error(const std::string& file, const std::string& field, const std::string& what) {
  throw config::ConfigError(file + ": field '" + field + "': " + what);
}

std::string json_type_name(const Json& j) {
  if (j.is_null()) return "null";
  if (j.is_boolean()) return "a boolean";
  if (j.is_number_integer() || j.is_number_unsigned()) return "an integer";
  if (j.is_number_float()) return "a number";
  if (j.is_string()) return "a string";
  if (j.is_array()) return "a list";
  return "an object";
}

const Json* HfConfigReader::find(const Json& obj, const std::string& key) const {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::int64_t HfConfigReader::integer(const Json& obj, const std::string& key, const std::string& shown,
                                     const std::int64_t* fallback) const {
  const Json* j = find(obj, key);
  if (j == nullptr) {
    if (fallback == nullptr) config_field_error(file, shown, "missing (an integer is required)");
    return *fallback;
  }
  if (j->is_number_unsigned()) {
    if (j->get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) {
      config_field_error(file, shown, "too large: " + j->dump());
    }
    return static_cast<std::int64_t>(j->get<std::uint64_t>());
  }
  if (j->is_number_integer()) return j->get<std::int64_t>();
  if (j->is_number_float()) {
    const double d = j->get<double>();
    if (std::floor(d) == d && std::fabs(d) < 9.0e15) return static_cast<std::int64_t>(d);
  }
  config_field_error(file, shown, "expected an integer, got " + json_type_name(*j) + " " + j->dump());
}

double HfConfigReader::real(const Json& obj, const std::string& key, const std::string& shown,
                            double fallback) const {
  const Json* j = find(obj, key);
  if (j == nullptr) return fallback;
  if (!j->is_number()) {
    config_field_error(file, shown, "expected a number, got " + json_type_name(*j) + " " + j->dump());
  }
  return j->get<double>();
}

bool HfConfigReader::boolean(const std::string& key, bool fallback) const {
  const Json* j = find(root, key);
  if (j == nullptr) return fallback;
  if (!j->is_boolean()) {
    config_field_error(file, key, "expected true or false, got " + json_type_name(*j) + " " + j->dump());
  }
  return j->get<bool>();
}

std::string HfConfigReader::string(const Json& obj, const std::string& key, const std::string& shown,
                                   const std::string& fallback) const {
  const Json* j = find(obj, key);
  if (j == nullptr) return fallback;
  if (!j->is_string()) {
    config_field_error(file, shown, "expected a string, got " + json_type_name(*j) + " " + j->dump());
  }
  return j->get<std::string>();
}

}  // namespace lft::model
