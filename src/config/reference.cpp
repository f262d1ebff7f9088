// `lftrain --help-config` (plain text) and docs/config.md (Markdown), both from the key table.
#include <string>
#include <vector>

#include "internal.h"
#include "lft/config/config.h"

namespace lft::config {
namespace {

struct Group {
  std::string table;  // "" for the top level
  std::string title;
  std::string intro;
  std::vector<const KeySpec*> keys;
};

std::string table_of(const KeySpec& spec) {
  const std::size_t dot = spec.path.find('.');
  return dot == std::string::npos ? std::string() : spec.path.substr(0, dot);
}

std::string intro_of(const std::string& table) {
  if (table.empty()) return "What to train, on what data, with which engine and optimizer.";
  if (table == "mesh") {
    return "Sizes of the device mesh, the one place every engine reads them from. -1 fills a "
           "size from the number of ranks; at most one size may be -1.";
  }
  if (table == "model") {
    return "An inline model in Hugging Face config.json names, trained from scratch; use it "
           "instead of model_name_or_path. When the table is present, every key marked required "
           "must be "
           "given.";
  }
  if (table == "dist_config") return "Options of the FSDP2 engine (distributed = \"fsdp2\").";
  return "";
}

// Groups in schema order: the top level first, then each table as it first appears.
std::vector<Group> groups() {
  std::vector<Group> out;
  for (const KeySpec& spec : schema()) {
    const std::string table = table_of(spec);
    Group* group = nullptr;
    for (Group& g : out) {
      if (g.table == table) group = &g;
    }
    if (group == nullptr) {
      out.push_back(
          Group{table, table.empty() ? "Top level" : "[" + table + "]", intro_of(table), {}});
      group = &out.back();
    }
    group->keys.push_back(&spec);
  }
  return out;
}

std::string default_text(const KeySpec& spec) {
  if (spec.default_value) return format_value(*spec.default_value);
  if (spec.required_in_table)
    return spec.path.find('.') == std::string::npos ? "required" : "required in table";
  return "unset";
}

std::string path_text(PathCheck check) {
  switch (check) {
    case PathCheck::File:
      return "an existing file";
    case PathCheck::Directory:
      return "an existing directory";
    case PathCheck::ModelFolder:
      return "a folder with config.json";
    case PathCheck::None:
      break;
  }
  return "";
}

std::string engines_text(const KeySpec& spec, const char* quote) {
  if (spec.engines.empty()) return "";
  std::string out;
  for (const std::string& e : spec.engines) out += (out.empty() ? "" : ", ") + (quote + e + quote);
  return out;
}

// The "allowed" column: values, range or path requirement.
std::string allowed_text(const KeySpec& spec, const char* quote) {
  std::string out;
  for (const std::string& v : spec.allowed) out += (out.empty() ? "" : ", ") + (quote + v + quote);
  const std::string range = detail::range_text(spec);
  if (!range.empty()) out += (out.empty() ? "" : "; ") + range;
  const std::string path = path_text(spec.path_check);
  if (!path.empty()) out += (out.empty() ? "" : "; ") + path;
  return out;
}

// Escapes what Markdown would read as table syntax, and in prose (`code` false) emphasis.
std::string cell(const std::string& text, bool code = false) {
  std::string out;
  for (char c : text) {
    if (c == '|' || (!code && c == '*')) out += '\\';
    out += c;
  }
  return out;
}

// Word-wraps `text` to lines of at most `width` columns, each starting with `indent`.
std::string wrap(const std::string& text, const std::string& indent, std::size_t width = 100) {
  std::string out;
  std::string line = indent;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find(' ', pos);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(pos, end - pos);
    if (line.size() > indent.size() && line.size() + 1 + word.size() > width) {
      out += line + "\n";
      line = indent;
    }
    line += (line.size() > indent.size() ? " " : "") + word;
    pos = end + 1;
  }
  return out + line + "\n";
}

}  // namespace

std::string help_text() {
  std::string out =
      "lftrain configuration keys\n"
      "\n"
      "A run is one TOML file; any key can be overridden on the command line:\n"
      "  lftrain run.toml key=value table.key=value\n"
      "Keys inside a table are written under its [table] header in the file, and as table.key\n"
      "on the command line. A bad configuration stops the run before any work (exit status 2).\n";
  for (const Group& group : groups()) {
    out += "\n" + group.title + "\n";
    if (!group.intro.empty()) out += wrap(group.intro, "  ");
    for (const KeySpec* spec : group.keys) {
      out += "\n  " + spec->path + " (" + (spec->list ? "string or list of strings" : type_name(spec->type)) + ", ";
      out += spec->default_value ? "default " + default_text(*spec) : default_text(*spec);
      if (!spec->allowed.empty()) {
        std::string values;
        for (const std::string& v : spec->allowed) values += (values.empty() ? "" : ", ") + v;
        out += ", one of: " + values;
      }
      const std::string range = detail::range_text(*spec);
      if (!range.empty()) out += ", " + range;
      const std::string path = path_text(spec->path_check);
      if (!path.empty()) out += ", " + path;
      if (!spec->engines.empty()) out += ", only with distributed = " + engines_text(*spec, "\"");
      out += ")\n" + wrap(spec->help, "      ");
    }
  }
  return out;
}

std::string reference_markdown() {
  std::string out =
      "# lftrain configuration reference\n"
      "\n"
      "<!-- Generated by `lftrain --help-config --markdown` from src/config/schema_keys.cpp. "
      "Do not edit by hand: change the key table and regenerate. -->\n"
      "\n"
      "This file is generated by `lftrain --help-config --markdown`; do not edit it by hand.\n"
      "\n"
      "A run is configured by one TOML file. Keys inside a table are written under its `[table]`\n"
      "header. Any key can be overridden on the command line, where table keys are written\n"
      "with a dot:\n"
      "\n"
      "```\n"
      "lftrain run.toml key=value table.key=value\n"
      "```\n"
      "\n"
      "An override value is read as a TOML value (`learning_rate=1e-4`, `bf16=true`) or, when it\n"
      "is not one, as a bare string (`output_dir=/tmp/run1`). Overrides replace the file's\n"
      "values. Every rank parses the same configuration; a bad one (unknown key, wrong type,\n"
      "value out of range, contradicting keys, missing file) stops the run before any work with\n"
      "a message naming the file, line, key and what is allowed, and exit status 2.\n";
  for (const Group& group : groups()) {
    out += "\n## " + group.title + "\n\n";
    if (!group.intro.empty()) out += group.intro + "\n\n";
    out += "| key | type | default | allowed | engines | description |\n";
    out += "|---|---|---|---|---|---|\n";
    for (const KeySpec* spec : group.keys) {
      const std::string def = default_text(*spec);
      const std::string allowed = allowed_text(*spec, "`");
      const std::string engines = engines_text(*spec, "`");
      out += "| `" + spec->path + "` | " + (spec->list ? "string or list of strings" : type_name(spec->type)) + " | ";
      out += (spec->default_value ? "`" + cell(def, true) + "`" : def) + " | ";
      out += cell(allowed, true) + " | " + (engines.empty() ? "all" : engines) + " | ";
      out += cell(spec->help) + " |\n";
    }
  }
  return out;
}

}  // namespace lft::config
