// The variables transformers' apply_chat_template hands a chat template
// (tokenization_utils_base.py and utils/chat_template_utils.py, transformers 5.x), built the same
// way so that Template::render gives the same text:
//  - every message loses its keys whose value is null (apply_chat_template drops None values);
//  - a message with reasoning (the first non-null of reasoning_content, thinking, reasoning) gets
//    it under both `thinking` (first key) and `reasoning_content` (_alias_reasoning_fields);
//  - the context is messages, tools, documents, add_generation_prompt (tools and documents null
//    when absent, as transformers passes None), then the tokenizer's special tokens, then the
//    extra keyword arguments (enable_thinking, ...), which override special tokens of the same
//    name.
#pragma once

#include <nlohmann/json.hpp>

namespace lft::data::jinja {

struct ChatInput {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // [{"role": ..., ...}, ...]
  nlohmann::ordered_json tools;      // null, or a list of JSON schemas
  nlohmann::ordered_json documents;  // null, or a list of {"title", "text"} objects
  bool add_generation_prompt = false;
  nlohmann::ordered_json special_tokens =
      nlohmann::ordered_json::object();                             // bos_token, eos_token...
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // enable_thinking, ...
};

// Throws Error (kType) where apply_chat_template raises: an empty conversation, a message that is
// not an object, tools or documents that are not lists of objects, an extra argument named like
// one of the four fixed variables.
nlohmann::ordered_json make_chat_context(const ChatInput& input);

}  // namespace lft::data::jinja
