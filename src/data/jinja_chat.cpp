#include "lft/data/jinja_chat.h"

#include <string>

#include "lft/data/jinja.h"

namespace lft::data::jinja {
namespace {

using ojson = nlohmann::ordered_json;

[[noreturn]] void reject(const std::string& message) { throw Error(ErrorKind::kType, message); }

// {"thinking": r, **message, "reasoning_content": r} when the message carries reasoning.
ojson alias_reasoning(const ojson& message) {
  const ojson* reasoning = nullptr;
  for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
    const auto it = message.find(key);
    if (it != message.end() && !it->is_null()) {
      reasoning = &*it;
      break;
    }
  }
  if (!reasoning) return message;
  ojson out = ojson::object();
  out["thinking"] = *reasoning;
  for (auto it = message.begin(); it != message.end(); ++it) {
    if (it.key() != "thinking") out[it.key()] = it.value();
  }
  out["reasoning_content"] = *reasoning;
  return out;
}

void check_list_of_objects(const ojson& value, const char* what) {
  if (value.is_null()) return;
  if (!value.is_array()) reject(std::string(what) + " must be a list");
  for (const auto& item : value) {
    if (!item.is_object()) reject(std::string(what) + " must be a list of dicts");
  }
}

}  // namespace

ojson make_chat_context(const ChatInput& input) {
  if (!input.messages.is_array() || input.messages.empty()) {
    reject("Cannot apply chat template to an empty conversation. Provide at least one message.");
  }
  check_list_of_objects(input.tools, "tools");
  check_list_of_objects(input.documents, "documents");
  ojson messages = ojson::array();
  for (const auto& message : input.messages) {
    if (!message.is_object()) reject("Chat messages should be dicts, but got " + message.dump());
    ojson kept = ojson::object();
    for (auto it = message.begin(); it != message.end(); ++it) {
      if (!it.value().is_null()) kept[it.key()] = it.value();
    }
    messages.push_back(alias_reasoning(kept));
  }
  ojson context = ojson::object();
  context["messages"] = std::move(messages);
  context["tools"] = input.tools;
  context["documents"] = input.documents;
  context["add_generation_prompt"] = input.add_generation_prompt;
  for (const ojson* group : {&input.special_tokens, &input.extra}) {
    if (!group->is_object()) reject("special tokens and extra arguments must be objects");
    for (auto it = group->begin(); it != group->end(); ++it) {
      const std::string& key = it.key();
      if (key == "messages" || key == "tools" || key == "documents" ||
          key == "add_generation_prompt") {
        reject("render() got multiple values for keyword argument '" + key + "'");
      }
      context[key] = it.value();
    }
  }
  return context;
}

}  // namespace lft::data::jinja
