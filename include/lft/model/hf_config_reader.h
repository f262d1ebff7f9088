// Typed reads of a Hugging Face config.json's fields, each error naming the file and the field.
// A field that is absent or null takes the fallback; present, it must have the right type.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace lft::model {

// Throws lft::config::ConfigError "<file>: field '<field>': <what>".
[[noreturn]] void config_field_error(const std::string& file, const std::string& field, const std::string& what);

// "an integer", "a string", ... (for messages).
std::string json_type_name(const nlohmann::json& j);

struct HfConfigReader {
  const nlohmann::json& root;
  std::string file;

  // The field, or null when absent or null.
  const nlohmann::json* find(const nlohmann::json& obj, const std::string& key) const;
  const nlohmann::json* find(const std::string& key) const { return find(root, key); }
  // Present and null (transformers' None where the field's default is not).
  bool is_null(const std::string& key) const {
    const auto it = root.find(key);
    return it != root.end() && it->is_null();
  }

  // `shown` names the field in messages (e.g. "rope_parameters.factor"); fallback null: required.
  std::int64_t integer(const nlohmann::json& obj, const std::string& key, const std::string& shown,
                       const std::int64_t* fallback) const;
  std::int64_t integer(const std::string& key) const { return integer(root, key, key, nullptr); }
  std::int64_t integer(const std::string& key, std::int64_t fallback) const {
    return integer(root, key, key, &fallback);
  }
  double real(const nlohmann::json& obj, const std::string& key, const std::string& shown, double fallback) const;
  double real(const std::string& key, double fallback) const { return real(root, key, key, fallback); }
  bool boolean(const std::string& key, bool fallback) const;
  std::string string(const nlohmann::json& obj, const std::string& key, const std::string& shown,
                     const std::string& fallback) const;
  std::string string(const std::string& key, const std::string& fallback) const {
    return string(root, key, key, fallback);
  }
};

}  // namespace lft::model
