// Internals of the config module shared by its .cpp files (not part of the public interface).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "lft/config/config.h"
#include "lft/config/schema.h"

namespace lft::config::detail {

// The Location::file of a key=value argument of the command line (parse_override sets it).
inline constexpr char kCommandLine[] = "<command line>";

// ---- schema helpers (schema.cpp) ----

// Range rules that the inclusive min/max of KeySpec cannot express.
enum class RangeKind {
  Plain,     // min/max as declared
  Positive,  // declared min 0, but 0 itself is rejected (timeouts, sizes)
  MeshDim,   // >= 1, or -1 to fill; 0 and < -1 are rejected
};
RangeKind range_kind(const KeySpec& spec);
bool in_range(const KeySpec& spec, double v);
// ">= 0", "between 0 and 1", "> 0", ">= 1, or -1 to fill"; "" when the key has no range.
std::string range_text(const KeySpec& spec);
// A bound or number for humans: "0", "1", "0.5", "1e-08".
std::string format_number(double v);
// "a float", "an int", ...
std::string type_with_article(ValueType type);
// "\"a\", \"b\", \"c\""
std::string quoted_list(const std::vector<std::string>& values);
// Table names ("mesh", "model", "dist_config") in schema order.
const std::vector<std::string>& table_names();
bool is_table_name(const std::string& name);
// The nearest declared key (or "[table]" when `as_table`), or "" when nothing is close.
std::string suggest_key(const std::string& path, bool as_table);
// The nearest of `candidates`, or "" when nothing is close.
std::string nearest(const std::string& word, const std::vector<std::string>& candidates);

// ---- parsed input (parse.cpp) ----

enum class ItemKind { Scalar, Table, Array, DateTime };

// One flattened value from the file or the command line, before validation.
struct Item {
  std::string path;
  ItemKind kind = ItemKind::Scalar;
  Value value;  // when kind == Scalar
  Location loc;
  int order = 0;  // source position: file entries by line/column, then overrides
};

struct Checked {
  Value value;
  Location loc;
  int order = 0;
};

struct Input {
  std::string file;
  bool yaml = false;                       // read as YAML (LlamaFactory's format)
  bool v1 = false;                         // a LlamaFactory v1 config (v1_keys.cpp)
  std::string format;                      // Config::format()
  std::vector<std::string> notes;          // keys accepted with no effect, and why
  std::vector<Item> items;                 // sorted by order
  std::map<std::string, Location> tables;  // tables present ("model" -> its header)
  std::map<std::string, Checked> entries;  // filled by validation
};

// ---- errors (validate.cpp) ----

// Throws ConfigError: "config error: <loc or file>: <what>", the quoted source line(s), a hint.
[[noreturn]] void fail(const std::string& file, const Location* loc, const std::string& what,
                       const std::string& hint, const Location* other = nullptr);
std::string describe(const Item& item);  // "string \"abc\"", "table", "int 3"
std::string shown_value(const Item& item);  // the scalar as written ("\"abc\"", "3"), else describe()
// The item at `path`, or nullptr.
Item* find_item(Input& in, const std::string& path);
const Item* find_item(const Input& in, const std::string& path);

// ---- YAML (parse_yaml.cpp) and LlamaFactory's keys (llamafactory_keys.cpp) ----
bool is_yaml_file(const std::string& file_name);  // .yaml or .yml
// Appends the items of a YAML config to in.items and its tables to in.tables.
void flatten_yaml(const std::string& text, const std::string& file_name, Input& in);
// Maps, notes or refuses LlamaFactory's keys that lftrain has no key of its own for; with YAML
// input, adds LlamaFactory's defaults where they differ from lftrain's.
class Problems;
void apply_llamafactory_keys(Input& in, Problems& problems);
// LlamaFactory v1's files (v1_keys.cpp): a YAML file with a v1-only key (model, peft_config,
// dist_config.name, micro_batch_size, ...), or with train_dataset and none of the classic
// trainer's stage / finetuning_type / dataset (the guide's files).
bool is_v1_config(const Input& in);
void apply_v1_keys(Input& in, Problems& problems);
// v1's plugin tables (peft_config, kernel_config, ...), flattened by the YAML reader like tables.
bool is_v1_plugin_table(const std::string& path);
bool is_v1_plugin_key(const std::string& path);

// The messages of the ConfigErrors of one validation run: each check that fails adds its own, so
// that a file with several mistakes gets them all in one run.
class Problems {
 public:
  template <class Check>
  void check(Check&& run) {
    try {
      run();
    } catch (const ConfigError& e) {
      messages_.emplace_back(e.what());
    }
  }
  bool empty() const { return messages_.empty(); }
  // Throws one ConfigError holding every message (in the order found), if there is any.
  void throw_if_any() const;

 private:
  std::vector<std::string> messages_;
};

// ---- validation phases, in the order parse_config runs them ----
// Each reports every problem it finds into `problems`; items that fail check_items are left out
// of in.entries, and the later phases only look at checked items.
void check_items(Input& in, Problems& problems);  // unknown keys, types, ranges, allowed values
void check_engines(const Input& in, Problems& problems);
void check_rules(const Input& in, Problems& problems);  // required keys and rules across keys
void check_paths(const Input& in, Problems& problems);  // files and folders that must exist

}  // namespace lft::config::detail
