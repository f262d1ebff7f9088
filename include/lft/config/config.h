// A validated run configuration: TOML text plus `key=value` command-line overrides, checked
// against the schema (schema.h). Parsing is pure: every rank parses the same text and reaches the
// same verdict, so a ConfigError is an every-rank error (exit 2).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "lft/config/schema.h"
#include "lft/runtime/error.h"
#include "lft/runtime/text.h"

namespace lft::config {

// Where a value came from. For a command-line override, file is "<command line>" and line is the
// 1-based index of the argument.
struct Location {
  std::string file;
  int line = 0;
  int column = 0;
  std::string line_text;  // the source line, or the whole argument

  std::string str() const;  // "run.toml:12:1" or "command-line argument 3 'lr=1'"
};

class ConfigError : public UsageError {
 public:
  using UsageError::UsageError;
};

class Config {
 public:
  // Explicitly given in the file or on the command line (a default does not count).
  bool is_set(const std::string& path) const;
  // True if any key under "table." was given (e.g. has_table("model")).
  bool has_table(const std::string& table) const;

  // The value, or the declared default. Throws std::logic_error for an undeclared key, a type that
  // does not match the declaration, or a key with neither value nor default (a programming error).
  bool boolean(const std::string& path) const;
  std::int64_t integer(const std::string& path) const;
  double real(const std::string& path) const;
  const std::string& string(const std::string& path) const;
  // A `list` key (schema.h): its strings, one for a plain string value.
  std::vector<std::string> strings(const std::string& path) const;

  // Where the key was set, or nullptr when it holds its default.
  const Location* location(const std::string& path) const;
  // "run.toml:12:1: key 'mesh.tp'" (or "key 'mesh.tp' (default)") for error messages.
  std::string where(const std::string& path) const;

  const std::string& source_name() const { return source_name_; }
  const std::string& source_text() const { return source_text_; }
  const std::vector<std::string>& overrides() const { return overrides_; }
  // Keys accepted with no effect in lftrain (LlamaFactory's report_to, ...), one line each: why.
  const std::vector<std::string>& notes() const { return notes_; }
  // Which format the file was read as: "lftrain TOML", "a LlamaFactory (classic trainer) YAML" or
  // "a LlamaFactory v1 YAML (key 'model' at job.yaml:1:1)".
  const std::string& format() const { return format_; }

  // global_batch_size resolved once the data-parallel size is known: a copy with
  // gradient_accumulation_steps = global_batch_size / (dp_size x per_device_train_batch_size), set
  // where global_batch_size was. Without global_batch_size, a plain copy. Throws ConfigError naming
  // both numbers when they do not divide.
  Config with_global_batch(int dp_size) const;

 private:
  friend Config parse_config(const std::string&, const std::string&,
                             const std::vector<std::string>&);
  struct Entry {
    Value value;
    Location location;
  };
  const Value& value_of(const std::string& path, ValueType expected) const;

  std::map<std::string, Entry> entries_;
  std::string source_name_;
  std::string source_text_;
  std::vector<std::string> overrides_;
  std::vector<std::string> notes_;
  std::string format_;
};

// Parses `text` (the content of the file `file_name`: YAML when it ends in .yaml or .yml, else
// TOML), maps LlamaFactory's own keys (docs/llamafactory.md), applies `overrides` ("key=value",
// "table.key=value"; the value is read as a TOML value, or as a bare string when it is not one)
// and validates everything that does not depend on the world: unknown keys (with the nearest valid
// key), types, ranges, allowed values, keys that do not apply to the chosen engine, contradicting
// keys, required keys, paths that must exist. Throws ConfigError with a message that names
// file:line:col, the key path and what is allowed: every problem found, in one message.
Config parse_config(const std::string& text, const std::string& file_name,
                    const std::vector<std::string>& overrides = {});

// `lftrain --help-config`: every key with type, default, allowed values and help.
std::string help_text();
// docs/config.md, generated from the same table.
std::string reference_markdown();



}  // namespace lft::config
