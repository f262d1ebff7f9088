#include "sft_record_formats.h"

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace lft::data::detail {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;  // tool calls and definitions: their key order is rendered

std::string quoted(const std::string& s) { return "\"" + s + "\""; }

const char* type_name(const json& j) {
  switch (j.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::string:
      return "a string";
    case json::value_t::boolean:
      return "a boolean";
    default:
      return "a number";
  }
}

// Reads an optional string field: missing or null gives "". Returns the reason when it is present
// with another type.
std::string optional_string(const json& record, const std::string& key, std::string& out) {
  out.clear();
  const auto it = record.find(key);
  if (it == record.end() || it->is_null()) return "";
  if (!it->is_string()) return "field " + quoted(key) + " is " + type_name(*it) + ", not a string";
  out = it->get<std::string>();
  return "";
}

std::string not_an_object(const json& record) {
  return std::string("the record is ") + type_name(record) + ", not a JSON object";
}

// A message list (system already taken off) must alternate (user|observation, assistant), end
// with an assistant message, and have no empty user or assistant text.
std::string check_turns(const std::vector<Message>& turns) {
  if (turns.empty()) return "the conversation has no messages";
  for (std::size_t i = 0; i < turns.size(); ++i) {
    const Message& m = turns[i];
    const bool prompt_turn = i % 2 == 0;
    const bool is_prompt = m.role == Role::User || m.role == Role::Observation;
    if (m.role == Role::System) {
      return "message " + std::to_string(i + 1) + " is a system message after the first turn";
    }
    if (prompt_turn != is_prompt) {
      return "roles out of order: message " + std::to_string(i + 1) + " is " + role_name(m.role) +
             " where " + (prompt_turn ? "user or observation" : "assistant") +
             " is expected (turns must alternate user, assistant, ...)";
    }
    if (m.text.empty() && m.role != Role::Observation && m.tool_calls.empty()) {
      return std::string(m.role == Role::Assistant ? "empty response" : "empty prompt") +
             " (message " + std::to_string(i + 1) + ", " + role_name(m.role) + ")";
    }
  }
  if (turns.size() % 2 != 0) return "the conversation does not end with an assistant response";
  return "";
}

// Builds `out` from an optional system prompt and checked turns.
std::string finish(const std::string& system, std::vector<Message> turns, Conversation& out) {
  std::string bad = check_turns(turns);
  if (!bad.empty()) return bad;
  out.messages.clear();
  if (!system.empty()) out.messages.push_back({Role::System, system, 0.0f});
  for (Message& m : turns) out.messages.push_back(std::move(m));
  return "";
}

Message turn(Role role, std::string text) {
  return {role, std::move(text), role == Role::Assistant ? 1.0f : 0.0f};
}

// The tool calls of a function_call turn's value (`list`: one object or a list of them) or of a
// tool_call part's value (one object), as LlamaFactory main's converters and renderer take them:
// each a JSON object with "name" and "arguments", kept as its JSON text.
std::string read_tool_calls(const std::string& text, bool list, std::vector<std::string>& out) {
  ojson value;
  try {
    value = ojson::parse(text);
  } catch (const ojson::parse_error&) {
    return "its tool call is not valid JSON";
  }
  ojson calls = ojson::array();
  if (list && value.is_array()) calls = std::move(value);
  else calls.push_back(std::move(value));
  for (const ojson& call : calls) {
    if (!call.is_object() || !call.contains("name") || !call.contains("arguments"))
      return "a tool call is a JSON object with \"name\" and \"arguments\"";
    out.push_back(call.dump());
  }
  return "";
}

// A record's tool definitions: a JSON string (LlamaFactory's datasets hold them as text), kept as
// the text of the JSON it holds; missing, null or "" give none.
std::string read_tools(const json& record, const std::string& key, std::string& out) {
  out.clear();
  if (key.empty()) return "";  // a dataset_info entry whose columns name no tools
  const auto it = record.find(key);
  if (it == record.end() || it->is_null()) return "";
  if (!it->is_string()) return "field " + quoted(key) + " is " + type_name(*it) + ", not a JSON string of tool definitions";
  if (it->get_ref<const std::string&>().empty()) return "";
  try {
    out = ojson::parse(it->get_ref<const std::string&>()).dump();
  } catch (const ojson::parse_error&) {
    return "field " + quoted(key) + " is not valid JSON";
  }
  return "";
}

// The text of a v1 message's content: a string, or a list of {"type":"text", "value"|"text"} (and
// with `reasoning` and `tool_calls` given, "reasoning" and "tool_call" parts).
std::string content_text(const json& content, std::string& out, std::string* reasoning = nullptr,
                         std::vector<std::string>* tool_calls = nullptr) {
  if (content.is_string()) {
    out = content.get<std::string>();
    return "";
  }
  if (!content.is_array()) {
    return std::string("\"content\" is ") + type_name(content) + ", not a string or a list";
  }
  out.clear();
  for (const json& part : content) {
    if (!part.is_object()) return "a content part is not an object";
    const auto type = part.find("type");
    if (type == part.end() || !type->is_string()) return "a content part has no string \"type\"";
    const std::string& kind = type->get_ref<const std::string&>();
    const bool thought = kind == "reasoning" && reasoning != nullptr;
    const bool call = kind == "tool_call" && tool_calls != nullptr;
    if (kind != "text" && !thought && !call) {
      return "content of type " + quoted(kind) + " is not supported (text, reasoning and tool_call only)";
    }
    auto value = part.find("value");
    if (value == part.end()) value = part.find("text");
    if (value == part.end() || !value->is_string()) return "a " + kind + " part has no string \"value\"";
    if (call) {
      const std::string bad = read_tool_calls(value->get<std::string>(), false, *tool_calls);
      if (!bad.empty()) return "a tool_call part: " + bad;
      continue;
    }
    (thought ? *reasoning : out) += value->get<std::string>();
  }
  return "";
}

}  // namespace

std::string parse_alpaca(const json& record, const SftColumns& c, Conversation& out) {
  if (!record.is_object()) return not_an_object(record);
  std::string instruction, input, output, system, bad;
  if (!(bad = optional_string(record, c.prompt, instruction)).empty()) return bad;
  if (!(bad = optional_string(record, c.query, input)).empty()) return bad;
  if (!(bad = optional_string(record, c.system, system)).empty()) return bad;
  std::string rejected;
  if (c.ranking) {  // LlamaFactory's pairwise alpaca: chosen and rejected strings
    for (const std::string* key : {&c.chosen, &c.rejected}) {
      const auto it = record.find(*key);
      if (it == record.end() || !it->is_string()) return "no string " + quoted(*key) + " field (ranking data)";
    }
    output = record[c.chosen].get<std::string>();
    rejected = record[c.rejected].get<std::string>();
    if (rejected.empty()) return "empty rejected answer " + quoted(c.rejected);
  } else {
    const auto response = record.find(c.response);
    if (response == record.end() || response->is_null()) return "no " + quoted(c.response) + " field";
    if (!(bad = optional_string(record, c.response, output)).empty()) return bad;
  }

  std::vector<Message> turns;
  const auto history = record.find(c.history);
  if (history != record.end() && !history->is_null()) {
    if (!history->is_array()) return "field " + quoted(c.history) + " is not a list of pairs";
    for (const json& pair : *history) {
      if (!pair.is_array() || pair.size() != 2 || !pair[0].is_string() || !pair[1].is_string()) {
        return "field " + quoted(c.history) + " is not a list of [query, response] string pairs";
      }
      turns.push_back(turn(Role::User, pair[0].get<std::string>()));
      turns.push_back(turn(Role::Assistant, pair[1].get<std::string>()));
    }
  }
  // LlamaFactory's query: the non-empty parts of instruction and input, joined by a newline
  // (v1's alpaca converter: by nothing).
  std::string query = instruction;
  if (!input.empty()) query += (query.empty() ? "" : c.query_separator) + input;
  if (query.empty()) return "empty prompt (" + quoted(c.prompt) + " and " + quoted(c.query) + ")";
  turns.push_back(turn(Role::User, std::move(query)));
  turns.push_back(turn(Role::Assistant, std::move(output)));
  bad = finish(system, std::move(turns), out);
  if (bad.empty() && c.ranking) {
    out.is_pair = true;
    out.rejected = turn(Role::Assistant, std::move(rejected));
  }
  return bad;
}

std::string parse_sharegpt(const json& record, const SftColumns& c, Conversation& out) {
  if (!record.is_object()) return not_an_object(record);
  const auto list = record.find(c.messages);
  if (list == record.end() || !list->is_array()) {
    return "no " + quoted(c.messages) + " list of messages";
  }
  std::string system, bad;
  if (!(bad = optional_string(record, c.system, system)).empty()) return bad;
  if (!(bad = read_tools(record, c.tools, out.tools)).empty()) return bad;
  std::vector<Message> turns;
  for (std::size_t i = 0; i < list->size(); ++i) {
    const json& m = (*list)[i];
    const std::string where = "message " + std::to_string(i + 1);
    if (!m.is_object()) return where + " is not an object";
    const auto role = m.find(c.role_tag);
    const auto content = m.find(c.content_tag);
    if (role == m.end() || !role->is_string())
      return where + " has no string " + quoted(c.role_tag);
    if (content == m.end() || !content->is_string()) {
      return where + " has no string " + quoted(c.content_tag);
    }
    const std::string tag = role->get<std::string>();
    std::string text = content->get<std::string>();
    if (i == 0 && tag == c.system_tag) {
      system = std::move(text);  // a leading system message replaces the system column
    } else if (tag == c.user_tag) {
      turns.push_back(turn(Role::User, std::move(text)));
    } else if (tag == c.assistant_tag) {
      turns.push_back(turn(Role::Assistant, std::move(text)));
    } else if (tag == c.observation_tag) {
      turns.push_back(turn(Role::Observation, std::move(text)));
    } else if (tag == c.function_tag) {
      Message call = turn(Role::Assistant, "");
      const std::string bad = read_tool_calls(text, true, call.tool_calls);
      if (!bad.empty()) return where + " is a " + quoted(tag) + " turn: " + bad;
      turns.push_back(std::move(call));
    } else if (tag == c.system_tag) {
      return where + " is a system message after the first turn";
    } else {
      return where + " has role " + quoted(tag) + "; expected " + quoted(c.user_tag) + ", " +
             quoted(c.assistant_tag) + ", " + quoted(c.observation_tag) + " or " +
             quoted(c.system_tag);
    }
  }
  if (!c.ranking) return finish(system, std::move(turns), out);
  // LlamaFactory's pairwise sharegpt: the conversation is the prompt (an odd number of turns),
  // chosen and rejected are one assistant message each.
  std::string answers[2];
  for (int k = 0; k < 2; ++k) {
    const std::string& key = k == 0 ? c.chosen : c.rejected;
    const auto it = record.find(key);
    if (it == record.end() || !it->is_object()) return "no " + quoted(key) + " message (ranking data)";
    const auto role = it->find(c.role_tag);
    const auto content = it->find(c.content_tag);
    if (role == it->end() || !role->is_string() || role->get<std::string>() != c.assistant_tag)
      return quoted(key) + " is not a " + quoted(c.assistant_tag) + " message";
    if (content == it->end() || !content->is_string() || content->get_ref<const std::string&>().empty())
      return quoted(key) + " has no " + quoted(c.content_tag) + " text";
    answers[k] = content->get<std::string>();
  }
  turns.push_back(turn(Role::Assistant, std::move(answers[0])));
  std::string bad_turns = finish(system, std::move(turns), out);
  if (!bad_turns.empty()) return bad_turns;
  out.is_pair = true;
  out.rejected = turn(Role::Assistant, std::move(answers[1]));
  return "";
}

std::string parse_messages(const json& record, Conversation& out) {
  if (!record.is_object()) return not_an_object(record);
  const auto list = record.find("messages");
  if (list == record.end() || !list->is_array()) return "no \"messages\" list";
  std::string system;
  if (std::string bad = read_tools(record, "tools", out.tools); !bad.empty()) return bad;
  std::vector<Message> turns;
  for (std::size_t i = 0; i < list->size(); ++i) {
    const json& m = (*list)[i];
    const std::string where = "message " + std::to_string(i + 1);
    if (!m.is_object()) return where + " is not an object";
    const auto role = m.find("role");
    const auto content = m.find("content");
    if (role == m.end() || !role->is_string()) return where + " has no string \"role\"";
    if (content == m.end()) return where + " has no \"content\"";
    std::string text, reasoning;
    std::vector<std::string> tool_calls;
    std::string bad = content_text(*content, text, &reasoning, &tool_calls);
    if (!bad.empty()) return where + ": " + bad;
    const auto reasoning_key = m.find("reasoning_content");
    if (reasoning_key != m.end() && reasoning_key->is_string()) reasoning += reasoning_key->get<std::string>();
    const std::string r = role->get<std::string>();
    Message msg;
    if (r == "user") {
      msg = turn(Role::User, std::move(text));
    } else if (r == "assistant") {
      msg = turn(Role::Assistant, std::move(text));
    } else if (r == "tool") {
      msg = turn(Role::Observation, std::move(text));
    } else if (r == "system") {
      msg = turn(Role::System, std::move(text));
    } else {
      return where + " has role " + quoted(r) + "; expected system, user, assistant or tool";
    }
    if (!reasoning.empty() && msg.role != Role::Assistant) return where + " has reasoning, which only answers hold";
    if (!tool_calls.empty() && msg.role != Role::Assistant) return where + " has tool calls, which only answers make";
    msg.reasoning = std::move(reasoning);
    msg.tool_calls = std::move(tool_calls);
    const auto weight = m.find("loss_weight");
    if (weight != m.end() && !weight->is_null()) {
      if (!weight->is_number() || !std::isfinite(weight->get<double>()) ||
          weight->get<double>() < 0) {
        return where + " has a \"loss_weight\" that is not a number >= 0";
      }
      // Weights are held as 32-bit floats: a larger one would become inf, and the loss NaN.
      if (weight->get<double>() > static_cast<double>(std::numeric_limits<float>::max()))
        return where + " has a \"loss_weight\" of " + weight->dump() + ", more than a 32-bit float holds (3.4e38)";
      msg.loss_weight = weight->get<float>();
      msg.weight_given = true;
    }
    if (i == 0 && msg.role == Role::System) {
      system = std::move(msg.text);
    } else {
      turns.push_back(std::move(msg));
    }
  }
  return finish(system, std::move(turns), out);
}

std::string parse_pair(const json& record, Conversation& out) {
  if (!record.is_object()) return not_an_object(record);
  Conversation sides[2];
  // v1 0.9.5's pair converter output ("chosen", "rejected"), or main's native records.
  const bool main_keys = !record.contains("chosen") && record.contains("chosen_messages");
  const char* const keys[2] = {main_keys ? "chosen_messages" : "chosen", main_keys ? "rejected_messages" : "rejected"};
  for (int k = 0; k < 2; ++k) {
    const auto list = record.find(keys[k]);
    if (list == record.end() || !list->is_array()) return std::string("no \"") + keys[k] + "\" list of messages";
    const std::string bad = parse_messages(json{{"messages", *list}}, sides[k]);
    if (!bad.empty()) return std::string(keys[k]) + ": " + bad;
  }
  if (std::string bad = read_tools(record, "tools", sides[0].tools); !bad.empty()) return bad;
  const std::vector<Message>& c = sides[0].messages;
  const std::vector<Message>& r = sides[1].messages;
  bool same_prompt = c.size() == r.size();
  for (std::size_t i = 0; same_prompt && i + 1 < c.size(); ++i)
    same_prompt = c[i].role == r[i].role && c[i].text == r[i].text && c[i].tool_calls == r[i].tool_calls;
  if (!same_prompt) return "chosen and rejected differ before their last message (a pair shares its prompt)";
  out = std::move(sides[0]);
  out.is_pair = true;
  out.rejected = r.back();
  return "";
}

std::string parse_text(const json& record, const SftColumns& c, Conversation& out) {
  if (!record.is_object()) return not_an_object(record);
  const auto text = record.find(c.text);
  if (text == record.end()) return "no " + quoted(c.text) + " field";
  if (!text->is_string()) return "field " + quoted(c.text) + " is " + type_name(*text);
  if (text->get_ref<const std::string&>().empty()) return "empty " + quoted(c.text);
  out.messages = {turn(Role::User, text->get<std::string>())};
  return "";
}

std::string detect_format(const json& record, const SftColumns& c) {
  if (!record.is_object()) return "";
  if (c.messages != "messages" && record.contains(c.messages)) return "sharegpt";
  if (record.contains("messages")) {
    // v1 chat records, unless sharegpt was configured to read "messages" with other role keys.
    const json& list = record["messages"];
    const bool v1 =
        list.is_array() && !list.empty() && list[0].is_object() && list[0].contains("role");
    return c.messages == "messages" && !v1 ? "sharegpt" : "messages";
  }
  if (record.contains(c.prompt)) return "alpaca";
  if (record.contains(c.text)) return "text";
  // LlamaFactory main's v1 pair records ({"chosen_messages": [...], "rejected_messages": [...]}).
  if (record.contains("chosen_messages") && record.contains("rejected_messages")) return "pair";
  return "";
}

}  // namespace lft::data::detail
