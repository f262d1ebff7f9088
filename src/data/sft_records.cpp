#include "lft/data/sft_records.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>

#include "lft/runtime/error.h"
#include "lft/runtime/json_nesting.h"
#include "sft_record_formats.h"

namespace lft::data {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw UsageError(where + ": " + what);
}

std::string read_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    fail(path, std::string("cannot read the dataset: ") + std::strerror(err) +
                   "; check that the path names an existing, readable file");
  }
  if (S_ISDIR(st.st_mode)) fail(path, "is a directory; name a .json, .jsonl or .txt data file");
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (!in || in.bad()) fail(path, "reading the dataset failed (I/O error or no permission)");
  std::string text = buffer.str();
  if (text.compare(0, 3, "\xEF\xBB\xBF") == 0) text.erase(0, 3);
  return text;
}

std::string extension(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  const std::size_t dot = path.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  std::string ext = path.substr(dot);
  for (char& ch : ext) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return ext;
}

bool blank(const std::string& s) {
  return std::all_of(s.begin(), s.end(),
                     [](char ch) { return std::isspace(static_cast<unsigned char>(ch)); });
}

// Lines of `text` without '\n' and a trailing '\r', with their 1-based numbers.
std::vector<std::pair<std::size_t, std::string>> lines_of(const std::string& text) {
  std::vector<std::pair<std::size_t, std::string>> lines;
  std::size_t begin = 0;
  for (std::size_t no = 1; begin < text.size(); ++no) {
    std::size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    std::size_t stop = end;
    if (stop > begin && text[stop - 1] == '\r') --stop;
    lines.emplace_back(no, text.substr(begin, stop - begin));
    begin = end + 1;
  }
  return lines;
}

// Where a record is and the record itself, or the reason it could not be parsed.
struct RawRecord {
  std::string where;
  json value;
  std::string parse_error;
};

std::vector<RawRecord> raw_records(const std::string& path, const std::string& text, bool& is_txt) {
  std::vector<RawRecord> records;
  const std::string ext = extension(path);
  is_txt = ext == ".txt";
  if (is_txt) {
    for (auto& [no, line] : lines_of(text)) {
      if (!blank(line)) records.push_back({path + ":" + std::to_string(no), json(line), ""});
    }
    return records;
  }
  if (ext != ".json" && ext != ".jsonl") {
    fail(path, "unsupported file type '" + (ext.empty() ? std::string("(none)") : ext) +
                   "'; datasets are .json (an array of records or JSON lines), .jsonl or .txt");
  }
  if (ext == ".json") {
    const std::size_t first = text.find_first_not_of(" \t\r\n");
    if (first == std::string::npos) return records;
    if (text[first] == '[') {
      if (const std::string deep = json_too_deep(text); !deep.empty()) fail(path, deep);
      json root;
      try {
        root = json::parse(text);
      } catch (const json::parse_error& e) {
        const std::size_t at = std::min<std::size_t>(e.byte, text.size());
        const auto line = 1 + std::count(text.begin(), text.begin() + at, '\n');
        fail(path + ":" + std::to_string(line),
             "invalid JSON; a .json dataset holds one array of records (or one record per line)");
      }
      if (!root.is_array()) fail(path, "expected a JSON array of records");
      for (std::size_t i = 0; i < root.size(); ++i) {
        records.push_back({path + ": record " + std::to_string(i + 1), std::move(root[i]), ""});
      }
      return records;
    }
  }
  for (auto& [no, line] : lines_of(text)) {  // JSON lines (also .json files holding them)
    if (blank(line)) continue;
    RawRecord r{path + ":" + std::to_string(no), json(), ""};
    try {
      r.parse_error = json_too_deep(line);
      if (r.parse_error.empty()) r.value = json::parse(line);
    } catch (const json::parse_error&) {
      r.parse_error = "invalid JSON";
    }
    records.push_back(std::move(r));
  }
  return records;
}

std::string field_names(const json& record) {
  if (!record.is_object()) return "not an object";
  std::string out;
  for (auto it = record.begin(); it != record.end(); ++it) {
    out += (out.empty() ? "\"" : ", \"") + it.key() + "\"";
  }
  return "fields " + (out.empty() ? std::string("none") : out);
}

// A field that dataset_info.json's "columns" names and no record has is a misspelling: an error
// naming the entry, the column, the field and the fields the records do have.
void check_named_columns(const DatasetSource& source, const std::vector<RawRecord>& records) {
  for (const auto& [column, field] : source.named_columns) {
    std::set<std::string> seen;
    bool found = false;
    for (const RawRecord& r : records) {
      if (!r.parse_error.empty() || !r.value.is_object()) continue;
      if (r.value.contains(field)) {
        found = true;
        break;
      }
      for (auto it = r.value.begin(); it != r.value.end() && seen.size() < 20; ++it) seen.insert(it.key());
    }
    if (found || records.empty()) continue;
    std::string have;
    for (const std::string& f : seen) have += (have.empty() ? "" : ", ") + f;
    throw UsageError(source.registry_entry + ": column \"" + column + "\" names the field \"" + field +
                     "\", which no record of " + source.path + " has (its records have: " +
                     (have.empty() ? "no fields" : have) + ")\n  hint: correct the field's name in dataset_info.json");
  }
}

FileReport read_file_records(const DatasetSource& source, std::vector<Conversation>& out) {
  const std::string& path = source.path;
  const RecordOptions& options = source.options;
  FileReport report;
  report.path = source.name.empty() ? path : source.name + " (" + path + ")";
  bool is_txt = false;
  std::vector<RawRecord> records = raw_records(path, read_file(path), is_txt);
  if (source.max_samples >= 0 && static_cast<std::int64_t>(records.size()) > source.max_samples)
    records.resize(static_cast<std::size_t>(source.max_samples));  // LlamaFactory: the first N rows
  report.format = options.format;
  if (is_txt && options.format != "auto" && options.format != "text") {
    fail(path, "a .txt file holds text documents, not " + options.format +
                   " records; use dataset_format = \"text\" (or \"auto\") or a .json/.jsonl file");
  }
  if (is_txt) {
    report.format = "text";
  } else if (report.format == "auto") {
    if (records.empty()) fail(path, "the dataset file holds no records");
    const RawRecord& first = records.front();
    report.format =
        first.parse_error.empty() ? detail::detect_format(first.value, options.columns) : "";
    if (report.format.empty()) {
      fail(first.where,
           "cannot tell the dataset format from the first record (" +
               (first.parse_error.empty() ? field_names(first.value) : first.parse_error) +
               "); set dataset_format to alpaca (instruction/input/output), "
               "sharegpt (conversations), messages or text");
    }
  }
  // v1's own records (a v1 dataset file without a converter) are messages, or main's pairs.
  if (report.format == "messages" && !records.empty() && records.front().parse_error.empty() &&
      detail::detect_format(records.front().value, options.columns) == "pair")
    report.format = "pair";
  std::function<std::string(const json&, Conversation&)> parse;
  const SftColumns& columns = options.columns;
  if (report.format == "pair" && !columns.ranking)
    fail(path, "holds preference pairs (v1's converter: pair, or main's chosen_messages / rejected_messages), which "
               "train with stage = \"dpo\" or \"rm\" (main's `llamafactory-cli dpo` / `rm`: give stage=dpo or stage=rm "
               "on the command line, or a DPO key such as pref_loss in the file)");
  if (columns.ranking && report.format != "alpaca" && report.format != "sharegpt" && report.format != "pair")
    fail(path, "preference pairs (ranking data) are read from alpaca or sharegpt records with \"" + columns.chosen +
                   "\" and \"" + columns.rejected + "\" answers, not from " + report.format + " records");
  if (report.format == "alpaca") {
    parse = [&](const json& r, Conversation& c) { return detail::parse_alpaca(r, columns, c); };
  } else if (report.format == "sharegpt") {
    parse = [&](const json& r, Conversation& c) { return detail::parse_sharegpt(r, columns, c); };
  } else if (report.format == "pair") {
    parse = detail::parse_pair;
  } else if (report.format == "messages") {
    parse = detail::parse_messages;
  } else if (is_txt) {
    parse = [](const json& r, Conversation& c) {
      c.messages = {{Role::User, r.get<std::string>(), 0.0f}};
      return std::string();
    };
  } else {
    parse = [&](const json& r, Conversation& c) { return detail::parse_text(r, columns, c); };
  }
  for (const RawRecord& r : records) {
    ++report.records;
    Conversation c;
    const std::string bad = r.parse_error.empty() ? parse(r.value, c) : r.parse_error;
    if (bad.empty()) {
      ++report.used;
      out.push_back(std::move(c));
      continue;
    }
    ++report.bad;
    if (report.first_bad.size() < options.max_reported) {
      report.first_bad.push_back(r.where + ": " + bad);
    }
  }
  check_named_columns(source, records);
  if (report.used == 0) {
    std::string why = report.records == 0 ? "the file holds no records"
                                          : "none of its " + std::to_string(report.records) +
                                                " records is usable as " + report.format + ":";
    for (const std::string& b : report.first_bad) why += "\n  " + b;
    fail(path, why);
  }
  return report;
}

}  // namespace

const char* role_name(Role role) {
  switch (role) {
    case Role::System:
      return "system";
    case Role::User:
      return "user";
    case Role::Assistant:
      return "assistant";
    case Role::Observation:
      return "observation";
  }
  return "?";
}

const std::vector<std::string>& record_formats() {
  static const std::vector<std::string> formats{"auto", "alpaca", "sharegpt", "messages", "text", "pair"};
  return formats;
}

std::string FileReport::summary() const {
  std::string line = path + ": " + format + ", " + std::to_string(records) + " records, " +
                     std::to_string(used) + " used";
  if (bad > 0) {
    line += ", " + std::to_string(bad) + " skipped";
    for (const std::string& b : first_bad) line += "\n  skipped " + b;
    if (static_cast<std::int64_t>(first_bad.size()) < bad) line += "\n  ...";
  }
  return line;
}

bool SftRecords::text_only() const {
  return std::all_of(files.begin(), files.end(),
                     [](const FileReport& f) { return f.format == "text"; });
}

std::string SftRecords::summary() const {
  std::string out;
  for (const FileReport& f : files) out += (out.empty() ? "" : "\n") + f.summary();
  return out;
}

SftRecords read_sft_records(const std::vector<DatasetSource>& sources) {
  const auto& formats = record_formats();
  if (sources.empty()) throw UsageError("no dataset file given");
  SftRecords result;
  for (const DatasetSource& source : sources) {
    if (std::find(formats.begin(), formats.end(), source.options.format) == formats.end())
      throw UsageError("unknown dataset_format \"" + source.options.format +
                       "\"; use auto, alpaca, sharegpt, messages, text or pair");
    result.files.push_back(read_file_records(source, result.conversations));
  }
  return result;
}

SftRecords read_sft_records(const std::vector<std::string>& paths, const RecordOptions& options) {
  return read_sft_records(sources_of_files(paths, options));
}

std::vector<DatasetSource> sources_of_files(const std::vector<std::string>& paths,
                                            const RecordOptions& options, std::int64_t max_samples) {
  std::vector<DatasetSource> sources;
  for (const std::string& path : paths) sources.push_back({path, options, max_samples, "", {}, ""});
  return sources;
}

}  // namespace lft::data
