// Error messages and the per-key checks: unknown keys, types, ranges, allowed values, engines,
// paths. Each phase walks the items in source order, so the first bad key by position is reported.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <variant>

#include "internal.h"
#include "lft/runtime/json_nesting.h"

namespace lft::config::detail {
namespace {

void quote(std::string& msg, const Location* loc) {
  if (loc == nullptr || loc->file == kCommandLine || loc->line <= 0 || loc->line_text.empty()) {
    return;
  }
  msg += "  " + std::to_string(loc->line) + " | " + loc->line_text + "\n";
}

std::string value_type_name(const Value& v) {
  static const char* names[] = {"bool", "int", "float", "string"};
  return names[v.index()];
}

// A value to show in "write e.g. key = ..." hints.
std::string example(const KeySpec& spec) {
  if (spec.default_value) return format_value(*spec.default_value);
  switch (spec.type) {
    case ValueType::Bool:
      return "true";
    case ValueType::Int:
      return spec.path.rfind("model.", 0) == 0 ? "1024" : "2";
    case ValueType::Float:
      return "1.0";
    case ValueType::String:
      return spec.path_check == PathCheck::None ? "\"...\"" : "\"path/to/it\"";
  }
  return "";
}

std::string leaf(const std::string& path) { return path.substr(path.rfind('.') + 1); }

std::string engine_value(const Input& in) {
  auto it = in.entries.find("distributed");
  return it == in.entries.end() ? std::string("none") : std::get<std::string>(it->second.value);
}

[[noreturn]] void type_error(const Input& in, const Item& item, const KeySpec& spec) {
  fail(
      in.file, &item.loc,
      "key '" + spec.path + "' must be " + type_with_article(spec.type) + ", got " + describe(item),
      "write e.g. " + leaf(spec.path) + " = " + example(spec) +
          (spec.path.find('.') != std::string::npos
               ? " under [" + spec.path.substr(0, spec.path.find('.')) + "]"
               : std::string()));
}

[[noreturn]] void unknown(const Input& in, const Item& item) {
  const std::string& path = item.path;
  const bool table = item.kind == ItemKind::Table && path.find('.') == std::string::npos;
  if (is_table_name(path)) {
    const KeySpec* first = nullptr;
    for (const KeySpec& spec : schema()) {
      if (spec.path.rfind(path + ".", 0) == 0) {
        first = &spec;
        break;
      }
    }
    fail(in.file, &item.loc, "'" + path + "' must be a table, got " + describe(item),
         "write its keys under a [" + path + "] header, e.g. [" + path + "] then " +
             leaf(first->path) + " = " + example(*first));
  }
  std::string what = table ? "unknown table [" + path + "]" : "unknown key '" + path + "'";
  const std::string guess = suggest_key(path, table);
  if (!guess.empty())
    what += table ? "; did you mean [" + guess + "]?" : "; did you mean '" + guess + "'?";
  fail(in.file, &item.loc, what, "see `lftrain --help-config` for every key, its type and default");
}

// The item's value converted to the declared type, or a type error.
Value typed(const Input& in, const Item& item, const KeySpec& spec) {
  if (item.kind != ItemKind::Scalar) type_error(in, item, spec);
  const Value& v = item.value;
  switch (spec.type) {
    case ValueType::Bool:
      if (std::holds_alternative<bool>(v)) return v;
      break;
    case ValueType::Int:
      if (std::holds_alternative<std::int64_t>(v)) return v;
      break;
    case ValueType::Float:
      if (std::holds_alternative<double>(v)) return v;
      if (std::holds_alternative<std::int64_t>(v)) {
        return static_cast<double>(std::get<std::int64_t>(v));
      }
      break;
    case ValueType::String:
      if (std::holds_alternative<std::string>(v)) return v;
      break;
  }
  type_error(in, item, spec);
}

void check_value(const Input& in, const Item& item, const KeySpec& spec, const Value& v) {
  const Location* loc = &item.loc;
  if (spec.type == ValueType::Int || spec.type == ValueType::Float) {
    const double d = spec.type == ValueType::Int ? static_cast<double>(std::get<std::int64_t>(v))
                                                 : std::get<double>(v);
    if (spec.type == ValueType::Int &&
        (std::get<std::int64_t>(v) == std::numeric_limits<std::int64_t>::max() ||
         std::get<std::int64_t>(v) == std::numeric_limits<std::int64_t>::min()))
      fail(in.file, loc, "key '" + spec.path + "' is outside the 64-bit integer range",
           "use a value " + range_text(spec) + " (" + spec.path + ": " + spec.help + ")");
    if (!std::isfinite(d)) {
      fail(in.file, loc, "key '" + spec.path + "' must be a finite number, got " + format_value(v),
           "use a value " + range_text(spec) + " (" + spec.path + ": " + spec.help + ")");
    }
    if (!in_range(spec, d)) {
      fail(in.file, loc,
           "key '" + spec.path + "' must be " + range_text(spec) + ", got " + format_value(v),
           "use a value " + range_text(spec) + " (" + spec.path + ": " + spec.help + ")");
    }
  }
  if (spec.type == ValueType::String && !spec.allowed.empty()) {
    const std::string& s = std::get<std::string>(v);
    if (spec.path == "distributed" && s == "ray") {
      fail(in.file, loc,
           "distributed = \"ray\" is not supported: lftrain runs multi-node jobs through "
           "MPI/Slurm, not Ray",
           "launch with `srun` inside `sbatch slurm/multinode.sbatch`, or `mpirun -np N "
           "--hostfile HOSTS build/lftrain run.toml`, and set distributed to one of " +
               quoted_list(spec.allowed));
    }
    if (std::find(spec.allowed.begin(), spec.allowed.end(), s) == spec.allowed.end()) {
      std::string what = "key '" + spec.path + "' = " + format_value(v) +
                         " is not allowed; allowed values: " + quoted_list(spec.allowed);
      const std::string guess = nearest(s, spec.allowed);
      if (!guess.empty()) what += "; did you mean \"" + guess + "\"?";
      fail(in.file, loc, what, spec.path + ": " + spec.help);
    }
  }
}

}  // namespace

void fail(const std::string& file, const Location* loc, const std::string& what,
          const std::string& hint, const Location* other) {
  std::string msg = "config error: " + (loc != nullptr ? loc->str() : file) + ": " + what + "\n";
  const bool other_first =
      other != nullptr && loc != nullptr && other->file == loc->file && other->line < loc->line;
  if (other_first) quote(msg, other);
  quote(msg, loc);
  if (other != nullptr && !other_first &&
      !(loc != nullptr && other->file == loc->file && other->line == loc->line)) {
    quote(msg, other);
  }
  msg += "  hint: " + hint;
  throw ConfigError(msg);
}

std::string describe(const Item& item) {
  switch (item.kind) {
    case ItemKind::Table:
      return "table";
    case ItemKind::Array:
      return "array";
    case ItemKind::DateTime:
      return "date/time";
    case ItemKind::Scalar:
      break;
  }
  return value_type_name(item.value) + " " + format_value(item.value);
}

std::string shown_value(const Item& item) {
  return item.kind == ItemKind::Scalar ? format_value(item.value) : describe(item);
}

Item* find_item(Input& in, const std::string& path) {
  auto it = std::find_if(in.items.begin(), in.items.end(), [&](const Item& i) { return i.path == path; });
  return it == in.items.end() ? nullptr : &*it;
}

const Item* find_item(const Input& in, const std::string& path) { return find_item(const_cast<Input&>(in), path); }

void Problems::throw_if_any() const {
  if (messages_.empty()) return;
  if (messages_.size() == 1) throw ConfigError(messages_.front());
  std::string all;
  for (const std::string& m : messages_) all += m + "\n";
  throw ConfigError(all + std::to_string(messages_.size()) +
                    " config errors; fix them all and run again");
}

void check_items(Input& in, Problems& problems) {
  for (const Item& item : in.items) {
    problems.check([&] {
      const KeySpec* spec = find_key(item.path);
      if (spec == nullptr) unknown(in, item);
      Value v = typed(in, item, *spec);
      check_value(in, item, *spec, v);
      in.entries[item.path] = Checked{std::move(v), item.loc, item.order};
    });
  }
}

void check_engines(const Input& in, Problems& problems) {
  const std::string engine = engine_value(in);
  for (const Item& item : in.items) {
    if (in.entries.count(item.path) == 0) continue;
    const KeySpec& spec = *find_key(item.path);
    if (spec.engines.empty() ||
        std::find(spec.engines.begin(), spec.engines.end(), engine) != spec.engines.end()) {
      continue;
    }
    std::string engines;
    for (const std::string& e : spec.engines) {
      engines += (engines.empty() ? "distributed = \"" : " or \"") + e + "\"";
    }
    problems.check([&] {
      fail(in.file, &item.loc,
           "key '" + spec.path + "' applies only to " + engines +
               " (this run has distributed = \"" + engine + "\")",
           "remove it, or set " + engines);
    });
  }
}

namespace {

void check_path(const Input& in, const Item& item) {
  namespace fs = std::filesystem;
  const KeySpec& spec = *find_key(item.path);
  if (spec.path_check == PathCheck::None) return;
  const std::string& value = std::get<std::string>(in.entries.at(item.path).value);
  for (const std::string& p : spec.list ? split_list(value) : std::vector<std::string>{value}) {
    const std::string shown = format_value(Value{p});
    const std::string key = "key '" + spec.path + "': ";
    const std::string rel =
        "check the path; relative paths are read from the directory lftrain is started in";
    std::error_code ec;
    const fs::file_status st = fs::status(p, ec);
    const bool exists = fs::exists(st);
    const bool is_dir = fs::is_directory(st);
    // A path that is there but cannot be followed (a symbolic link loop, a folder without search
    // permission) says why, not "not found".
    if (!exists && ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory)
      fail(in.file, &item.loc, key + "cannot reach " + shown + ": " + ec.message(),
           "check the path and its symbolic links and permissions");
    switch (spec.path_check) {
      case PathCheck::File:
        if (!exists) fail(in.file, &item.loc, key + "file not found: " + shown, rel);
        if (is_dir) fail(in.file, &item.loc, key + shown + " is a directory, not a file", rel);
        break;
      case PathCheck::Directory:
        if (!exists) fail(in.file, &item.loc, key + "directory not found: " + shown, rel);
        if (!is_dir) fail(in.file, &item.loc, key + shown + " is not a directory", rel);
        break;
      case PathCheck::ModelFolder: {
        const std::string what_hf =
            "model_name_or_path must be a local Hugging Face model folder (config.json, tokenizer "
            "files, *.safetensors): download it first, e.g. `huggingface-cli download ORG/NAME "
            "--local-dir DIR`, or train from scratch with an inline [model] table";
        if (!exists) fail(in.file, &item.loc, key + "model folder not found: " + shown, what_hf);
        if (!is_dir) fail(in.file, &item.loc, key + shown + " is not a directory", what_hf);
        const fs::path json_path = fs::path(p) / "config.json";
        if (!fs::is_regular_file(json_path, ec)) {
          fail(in.file, &item.loc, key + "model folder " + shown + " has no config.json", what_hf);
        }
        std::ifstream file(json_path);
        const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
        const nlohmann::json json =
            json_too_deep(text).empty() ? nlohmann::json::parse(text, nullptr, false) : nlohmann::json(nlohmann::json::value_t::discarded);
        if (json.is_discarded() || !json.is_object()) {
          fail(in.file, &item.loc,
               key + format_value(Value{json_path.string()}) + " is not a JSON object",
               "config.json of a Hugging Face model is a JSON object (model_type, hidden_size, "
               "...); download the model again");
        }
        break;
      }
      case PathCheck::None:
        break;
    }
  }
}

}  // namespace

void check_paths(const Input& in, Problems& problems) {
  for (const Item& item : in.items)
    if (in.entries.count(item.path) != 0) problems.check([&] { check_path(in, item); });
}

}  // namespace lft::config::detail
