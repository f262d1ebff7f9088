// The one table of configuration keys. Every key lftrain understands is declared here once;
// validation, `lftrain --help-config` and docs/config.md are all generated from it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace lft::config {

enum class ValueType { Bool, Int, Float, String };

using Value = std::variant<bool, std::int64_t, double, std::string>;

// What a string key that names a path must point at.
enum class PathCheck { None, File, Directory, ModelFolder };

struct KeySpec {
  std::string path;                    // dotted: "learning_rate", "mesh.tp", "model.hidden_size"
  ValueType type = ValueType::String;
  std::optional<Value> default_value;  // nullopt: no default (optional key, or required_in_table)
  std::vector<std::string> allowed;    // String keys: the allowed values (empty = any)
  std::optional<double> min;           // Int/Float keys: inclusive range
  std::optional<double> max;
  std::string help;                    // one line
  std::vector<std::string> engines;    // engines the key applies to (empty = every engine)
  bool required_in_table = false;      // must be given whenever its table is present
  PathCheck path_check = PathCheck::None;
  // A String key that also takes a TOML array of strings. The value keeps them joined by '\n'
  // (no path or name holds a newline); Config::strings() returns them.
  bool list = false;
};

// The strings of a `list` key's value.
std::vector<std::string> split_list(const std::string& joined);

// The full table, in documentation order.
const std::vector<KeySpec>& schema();

// The spec for a dotted path, or nullptr.
const KeySpec* find_key(const std::string& path);

// What an engine supports, declared once per `distributed` name (schema.cpp): the config's rules,
// the run plan, the trainer and `lftrain --list-engines` read these, not engine names. (Which
// keys apply to which engine is each key's `engines`.)
struct EngineCapabilities {
  std::string name;
  bool float8 = false;             // fp8 = true: float8 linears
  bool float8_all_gather = false;  // dist_config.fp8_enable_fsdp_float8_all_gather
  bool offload = false;            // shards, gradients and AdamW state in host memory
  bool deepspeed_config = false;   // configured by a DeepSpeed JSON file (key `deepspeed`)
  bool sequence_parallel = false;  // dist_config.sequence_parallel (activations split over tp)
};
const std::vector<EngineCapabilities>& engine_capabilities();
// std::logic_error for a name not in the table (`distributed` is checked against it first).
const EngineCapabilities& capabilities_of(const std::string& engine);
// The engines that have `capability`, in documentation order: "none, ddp, fsdp2 and megatron".
std::string engines_with(bool EngineCapabilities::*capability);

// Every engine name `distributed` may take, in documentation order.
const std::vector<std::string>& engine_names();

const char* type_name(ValueType type);
std::string format_value(const Value& value);

}  // namespace lft::config
