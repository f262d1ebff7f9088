#include "lft/data/corpus.h"

#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "lft/runtime/error.h"
#include "lft/runtime/json_nesting.h"

namespace lft::data {
namespace {

using nlohmann::json;

const char* const kFormatsHelp =
    "pre-training data is a .txt file (one document per line), a .jsonl file (one "
    "{\"text\": \"...\"} object per line) or a .json file (an array of {\"text\": \"...\"} objects)";

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw UsageError(where + ": " + what);
}

std::string at_line(const std::string& path, std::size_t line) {
  return path + ":" + std::to_string(line);
}

std::string read_whole_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    fail(path, std::string("cannot read the training data: ") + std::strerror(err) +
                   "; check that train_dataset names an existing, readable file");
  }
  if (S_ISDIR(st.st_mode)) {
    fail(path, "is a directory, not a file; train_dataset must name one data file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    fail(path, std::string("cannot open the training data: ") + std::strerror(err) +
                   "; check the file's permissions");
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) fail(path, "reading the training data failed (I/O error)");
  std::string text = buffer.str();
  if (text.size() >= 3 && text.compare(0, 3, "\xEF\xBB\xBF") == 0) text.erase(0, 3);
  return text;
}

std::string lower_extension(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  const std::size_t dot = path.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  std::string ext = path.substr(dot);
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext;
}

bool is_blank(const std::string& s) {
  for (const char c : s) {
    if (!std::isspace(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// Calls fn(line_number, line) for every line of `text`, without '\n' and a trailing '\r'.
template <typename Fn>
void for_each_line(const std::string& text, Fn&& fn) {
  std::size_t begin = 0;
  std::size_t line_no = 1;
  while (begin < text.size()) {
    std::size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    std::size_t stop = end;
    if (stop > begin && text[stop - 1] == '\r') --stop;
    fn(line_no, text.substr(begin, stop - begin));
    begin = end + 1;
    ++line_no;
  }
}

const char* type_name(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float: return "a number";
    default: return "not a JSON value";
  }
}

// nlohmann's parse_error text without its "[json.exception...] parse error at line L, column C: "
// prefix, which counts within the parsed text rather than the file.
std::string parse_error_detail(const json::parse_error& e) {
  std::string what = e.what();
  const std::size_t col = what.find("column ");
  if (col != std::string::npos) {
    const std::size_t colon = what.find(": ", col);
    if (colon != std::string::npos) return what.substr(colon + 2);
  }
  const std::size_t bracket = what.find("] ");
  return bracket == std::string::npos ? what : what.substr(bracket + 2);
}

std::string field_list(const json& object) {
  std::string out;
  std::size_t n = 0;
  for (auto it = object.begin(); it != object.end(); ++it, ++n) {
    if (n == 12) {
      out += ", ...";
      break;
    }
    if (n > 0) out += ", ";
    out += "\"" + it.key() + "\"";
  }
  return out.empty() ? "none" : out;
}

// The SFT format an object without "text" looks like, or "" when none.
std::string sft_format_of(const json& object) {
  if (object.contains("instruction") && (object.contains("output") || object.contains("input"))) {
    return "an alpaca (instruction/input/output) SFT record";
  }
  if (object.contains("conversations")) return "a sharegpt (conversations) SFT record";
  if (object.contains("messages")) return "a chat (messages) SFT record";
  if (object.contains("chosen") && object.contains("rejected")) {
    return "a preference (chosen/rejected) record";
  }
  return "";
}

// The document of one record; `where` is "path:line" (and record number for .json). Returns false
// for an empty text (the record is skipped).
bool take_text(const json& record, const std::string& where, std::string& out) {
  if (!record.is_object()) {
    fail(where, std::string("expected a JSON object with a \"text\" field, found ") +
                    type_name(record) + "; " + kFormatsHelp);
  }
  const auto it = record.find("text");
  if (it == record.end()) {
    const std::string sft = sft_format_of(record);
    if (!sft.empty()) {
      fail(where, "the record has no \"text\" field (fields: " + field_list(record) +
                      "); it looks like " + sft +
                      ". This build trains on pre-training text only; SFT formats (alpaca, "
                      "sharegpt, messages) and chat templates come with the dataset work. For "
                      "now, " + kFormatsHelp);
    }
    fail(where, "the record has no \"text\" field (fields: " + field_list(record) +
                    "); every record must hold its document as a string in \"text\", so rename "
                    "that field or convert the file");
  }
  if (!it->is_string()) {
    fail(where, std::string("field \"text\" is ") + type_name(*it) +
                    ", not a string; every record must hold its document as a string in \"text\"");
  }
  const std::string& text = it->get_ref<const std::string&>();
  if (text.empty()) return false;
  out = text;
  return true;
}

std::vector<std::string> read_txt(const std::string& text) {
  std::vector<std::string> docs;
  for_each_line(text, [&](std::size_t, std::string line) {
    if (!is_blank(line)) docs.push_back(std::move(line));
  });
  return docs;
}

std::vector<std::string> read_jsonl(const std::string& path, const std::string& text) {
  std::vector<std::string> docs;
  for_each_line(text, [&](std::size_t line_no, const std::string& line) {
    if (is_blank(line)) return;
    json record;
    if (const std::string deep = json_too_deep(line); !deep.empty()) fail(at_line(path, line_no), deep);
    try {
      record = json::parse(line);
    } catch (const json::parse_error& e) {
      fail(at_line(path, line_no) + ":" + std::to_string(e.byte),
           "invalid JSON (" + parse_error_detail(e) +
               "); each line of a .jsonl file must be one complete JSON object such as "
               "{\"text\": \"...\"}");
    }
    std::string doc;
    if (take_text(record, at_line(path, line_no), doc)) docs.push_back(std::move(doc));
  });
  return docs;
}

// 1-based line and column of byte `offset` (0-based) of `text`.
std::pair<std::size_t, std::size_t> line_column(const std::string& text, std::size_t offset) {
  std::size_t line = 1;
  std::size_t line_start = 0;
  const std::size_t stop = offset < text.size() ? offset : text.size();
  for (std::size_t i = 0; i < stop; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return {line, offset - line_start + 1};
}

// Byte offsets where the elements of the top-level array of the valid JSON `text` start.
std::vector<std::size_t> top_level_element_offsets(const std::string& text) {
  std::vector<std::size_t> offsets;
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  bool expect_value = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (std::isspace(static_cast<unsigned char>(c))) continue;
    if (depth == 1 && expect_value && c != ']') {
      offsets.push_back(i);
      expect_value = false;
    }
    switch (c) {
      case '"': in_string = true; break;
      case '[':
      case '{':
        ++depth;
        if (depth == 1) expect_value = true;
        break;
      case ']':
      case '}': --depth; break;
      case ',':
        if (depth == 1) expect_value = true;
        break;
      default: break;
    }
  }
  return offsets;
}

std::vector<std::string> read_json(const std::string& path, const std::string& text) {
  const std::size_t first = text.find_first_not_of(" \t\r\n");
  if (const std::string deep = json_too_deep(text); !deep.empty()) fail(path, deep);
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& e) {
    // A file of JSON lines named .json (Hugging Face `datasets` reads those too).
    if (first != std::string::npos && text[first] == '{') {
      std::size_t end = text.find('\n', first);
      if (end == std::string::npos) end = text.size();
      if (json::accept(text.substr(first, end - first))) return read_jsonl(path, text);
    }
    const auto [line, column] = line_column(text, e.byte > 0 ? e.byte - 1 : 0);
    fail(path + ":" + std::to_string(line) + ":" + std::to_string(column),
         "invalid JSON (" + parse_error_detail(e) + "); a .json file must hold one JSON array " +
             "of {\"text\": \"...\"} objects");
  }
  if (!root.is_array()) {
    const std::size_t line = first == std::string::npos ? 1 : line_column(text, first).first;
    if (root.is_object() && (root.contains("text") || !sft_format_of(root).empty())) {
      // One record: report it as such (its format may be the real problem).
      std::string doc;
      take_text(root, at_line(path, line), doc);
    }
    fail(at_line(path, line), std::string("expected a JSON array of {\"text\": \"...\"} "
                                          "objects, found ") +
                                  type_name(root) + "; " + kFormatsHelp);
  }
  const std::vector<std::size_t> offsets = top_level_element_offsets(text);
  std::vector<std::string> docs;
  docs.reserve(root.size());
  std::size_t line = 1;
  std::size_t scanned = 0;
  for (std::size_t i = 0; i < root.size(); ++i) {
    const std::size_t offset = i < offsets.size() ? offsets[i] : scanned;
    for (; scanned < offset; ++scanned) {
      if (text[scanned] == '\n') ++line;
    }
    std::string doc;
    if (take_text(root[i], at_line(path, line) + ": record " + std::to_string(i + 1), doc)) {
      docs.push_back(std::move(doc));
    }
  }
  return docs;
}

}  // namespace

std::vector<std::string> read_text_corpus(const std::string& path) {
  const std::string ext = lower_extension(path);
  if (ext != ".txt" && ext != ".jsonl" && ext != ".json") {
    fail(path, "unsupported file type '" + (ext.empty() ? std::string("(no extension)") : ext) +
                   "'; " + kFormatsHelp);
  }
  const std::string text = read_whole_file(path);
  std::vector<std::string> docs;
  if (ext == ".txt") {
    docs = read_txt(text);
  } else if (ext == ".jsonl") {
    docs = read_jsonl(path, text);
  } else {
    docs = read_json(path, text);
  }
  if (docs.empty()) {
    fail(path, text.empty() ? "the training data file is empty; give a file with at least one "
                              "document"
                            : "the training data holds no documents (only empty lines or empty "
                              "\"text\" fields); give a file with at least one non-empty document");
  }
  return docs;
}

}  // namespace lft::data
