// Reading SFT and pre-training records in LlamaFactory's dataset formats into conversations.
//
// Formats (`RecordOptions::format`):
//   alpaca    {instruction, input, output, system?, history? [[query, response], ...]}
//   sharegpt  {conversations: [{from, value}, ...], system?, tools?}; keys and role values
//             configurable (SftColumns), defaults as LlamaFactory's dataset_info; a function_call
//             turn's value is a tool call (a JSON object {name, arguments}, or a list of them)
//   messages  {messages: [{role, content, loss_weight?}, ...], tools?}: LlamaFactory v1 chat
//             records; content is a string or a list of parts {"type": "text" | "reasoning" |
//             "tool_call", "value" (or "text"): ...}; roles system / user / assistant / tool
//             (tool = observation)
// `tools` is the JSON text of the tool definitions (LlamaFactory's datasets hold it as a string).
//   text      {text} objects, or the lines of a .txt file: pre-training documents
//   auto      decided per file from its first record (.txt files are text)
// Files: .json (one array of records, or JSON lines), .jsonl (one record per line), .txt (text
// only). A record that cannot be used (missing field, wrong type, empty response, roles out of
// order, unsupported content) is skipped and counted; where it was is reported as "path:line"
// (.jsonl) or "path: record N" (1-based, .json arrays).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lft::data {

// Observation is a tool's result (sharegpt "observation", messages "tool"); templates render it
// with their tool-response scaffolding.
enum class Role { System, User, Assistant, Observation };

const char* role_name(Role role);

struct Message {
  Role role = Role::User;
  std::string text;
  // Weight of this message's tokens in the loss. Only assistant messages are trained; the weight
  // of other roles is kept as read but never used.
  float loss_weight = 1.0f;
  bool weight_given = false;  // the record set loss_weight (v1's templates default it by role)
  // An answer's reasoning (v1's "reasoning" content parts, or a "reasoning_content" string), which
  // only a model's own Jinja template renders (jinja_sft.h); the other templates refuse it.
  std::string reasoning = {};
  // An answer's tool calls (sharegpt function_call turns, v1's "tool_call" parts), each the JSON
  // text of one object with "name" and "arguments" (key order kept); the model's own template only.
  std::vector<std::string> tool_calls = {};
};

// An optional leading System message, then pairs (User or Observation, Assistant), at least one
// pair. Pre-training documents (format text) are a single User message instead.
// A preference pair (ranking data) ends with the chosen answer and holds the rejected one beside
// it: the same prompt and history, another last answer.
struct Conversation {
  std::vector<Message> messages;
  std::string tools;  // the JSON text of the tool definitions ("" without); the model's own template only
  bool is_pair = false;
  Message rejected;  // is_pair: the rejected last answer (Assistant)
};

// The record keys and role values, as LlamaFactory's dataset_info "columns" and "tags" name them.
struct SftColumns {
  // alpaca
  std::string prompt = "instruction";
  std::string query = "input";
  std::string response = "output";
  std::string history = "history";
  std::string query_separator = "\n";  // between prompt and query ("" in LlamaFactory v1's converter)
  // alpaca and sharegpt: a record-level system prompt (a leading system message wins)
  std::string system = "system";
  // sharegpt
  std::string messages = "conversations";
  std::string role_tag = "from";
  std::string content_tag = "value";
  std::string user_tag = "human";
  std::string assistant_tag = "gpt";
  std::string observation_tag = "observation";
  std::string function_tag = "function_call";  // an assistant turn whose value is its tool calls
  std::string system_tag = "system";
  std::string tools = "tools";  // the tool definitions, a JSON string (sharegpt; messages records' "tools")
  // text: the document of a pre-training record (LlamaFactory's `prompt` column for stage pt)
  std::string text = "text";
  // Ranking data (dataset_info "ranking": true, or any file with stage dpo): each record is a
  // preference pair whose last answer is given twice, in these columns (alpaca: strings; sharegpt:
  // messages {role_tag, content_tag} with the assistant tag) instead of the response.
  bool ranking = false;
  std::string chosen = "chosen";
  std::string rejected = "rejected";
};

struct RecordOptions {
  std::string format = "auto";  // "auto" | "alpaca" | "sharegpt" | "messages" | "text"
  SftColumns columns;
  std::size_t max_reported = 5;  // bad records named per file
};

// What happened to one file.
struct FileReport {
  std::string path;
  std::string format;  // the format used (what "auto" chose)
  std::int64_t records = 0;
  std::int64_t used = 0;
  std::int64_t bad = 0;
  std::vector<std::string> first_bad;  // "path:line: reason", at most max_reported
  // One line for the log: "alpaca_en_demo.json: alpaca, 999 records, 999 used".
  std::string summary() const;
};

struct SftRecords {
  std::vector<Conversation> conversations;  // all files, in file then record order
  std::vector<FileReport> files;
  // True when every conversation came from format "text" (pre-training documents only).
  bool text_only() const;
  std::string summary() const;  // the files' summaries, one per line
};

// One dataset file and how to read it: a train_dataset path with the run's dataset_format, or a
// dataset_info.json entry (data/dataset_registry.h) with its own formatting, columns and tags.
struct DatasetSource {
  std::string path;
  RecordOptions options;
  std::int64_t max_samples = -1;  // only the first this many records; -1: all
  std::string name;               // the dataset_info.json name, "" for a plain file
  // The record fields its dataset_info.json "columns" named, as (column, field): each must occur in
  // some record of the file (a misspelt field would drop that part of every record silently).
  std::vector<std::pair<std::string, std::string>> named_columns;
  std::string registry_entry;  // for messages: "<dir>/dataset_info.json: \"<name>\""
  // A v1 dataset file's size and weight (v1_dataset_file.h); -1: not given.
  std::int64_t v1_size = -1;
  double v1_weight = -1;
};

// The formats accepted by RecordOptions::format, "auto" first.
const std::vector<std::string>& record_formats();

// Reads every file of `paths` in order. Throws lft::UsageError naming the file for an unknown
// format, an unreadable file, invalid JSON in a .json file, a first record from which "auto"
// cannot tell the format, a .txt file read as another format, and a file with no usable record
// (with its first bad records). Throws lft::UsageError when `paths` is empty.
SftRecords read_sft_records(const std::vector<DatasetSource>& sources);
SftRecords read_sft_records(const std::vector<std::string>& paths, const RecordOptions& options);
// `paths` read with `options` (and max_samples) each.
std::vector<DatasetSource> sources_of_files(const std::vector<std::string>& paths,
                                            const RecordOptions& options, std::int64_t max_samples = -1);

}  // namespace lft::data
