#include "lft/data/jinja_sft.h"

#include <algorithm>
#include <stdexcept>

#include "lft/data/jinja_chat.h"
#include "lft/runtime/error.h"

namespace lft::data {
namespace {

using ojson = nlohmann::ordered_json;

// The message as v1 hands it to transformers (_to_hf_messages): its text as content, its tool
// calls as tool_calls [{"type": "function", "function": {"name", "arguments"}}], its reasoning as
// reasoning_content; in training examples the text, the reasoning and the string values of a call's
// arguments object with their special tokens' texts escaped first (special_escape.h), as main's
// escape.py does.
ojson hf_message(const Message& m, const SpecialTokenEscaper* escaper = nullptr) {
  const auto text = [&](const std::string& t) { return escaper != nullptr ? escaper->escape(t) : t; };
  ojson j = ojson::object();
  j["role"] = m.role == Role::Observation ? "tool" : role_name(m.role);
  j["content"] = text(m.text);
  if (!m.tool_calls.empty()) {
    ojson calls = ojson::array();
    for (const std::string& call_text : m.tool_calls) {
      const ojson call = ojson::parse(call_text);  // an object with name and arguments (sft_records.h)
      ojson arguments = call["arguments"];
      if (escaper != nullptr && arguments.is_object())
        for (auto& item : arguments.items())
          if (item.value().is_string()) item.value() = text(item.value().get<std::string>());
      ojson function = ojson::object();
      function["name"] = call["name"];
      function["arguments"] = std::move(arguments);
      ojson entry = ojson::object();
      entry["type"] = "function";
      entry["function"] = std::move(function);
      calls.push_back(std::move(entry));
    }
    j["tool_calls"] = std::move(calls);
  }
  if (!m.reasoning.empty()) j["reasoning_content"] = text(m.reasoning);
  return j;
}

// The tools handed to the template (null without): main escapes the text its converter kept
// (Python's json.dumps of the record's tools) and reads it back, a single definition as a list.
ojson hf_tools(const Conversation& conv, const SpecialTokenEscaper* escaper = nullptr) {
  if (conv.tools.empty()) return nullptr;
  const std::string text = jinja::python_json_dumps(ojson::parse(conv.tools));
  ojson tools = ojson::parse(escaper != nullptr ? escaper->escape(text) : text);
  if (tools.is_array()) return tools;
  ojson list = ojson::array();
  list.push_back(std::move(tools));
  return list;
}

jinja::Template parsed(const ModelChatTemplate& model) {
  try {
    return jinja::Template::parse(model.text, model.source);
  } catch (const jinja::Error& e) {
    throw UsageError(std::string("the chat template of ") + model.source + " cannot be read: " + e.what() +
                     "\n  hint: give a template lftrain reads as custom_chat_template, or a built-in one as template");
  }
}

}  // namespace

JinjaChatEncoder::JinjaChatEncoder(ModelChatTemplate model) : model_(std::move(model)), template_(parsed(model_)) {}

std::string JinjaChatEncoder::render_messages(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                              bool add_generation_prompt, bool enable_thinking) const {
  jinja::ChatInput in;
  in.messages = messages;
  in.tools = tools;
  in.add_generation_prompt = add_generation_prompt;
  in.special_tokens = model_.special_tokens;
  in.extra["enable_thinking"] = enable_thinking;
  try {
    return template_.render(jinja::make_chat_context(in));
  } catch (const jinja::Error& e) {
    throw UsageError(std::string("the chat template of ") + model_.source + " failed on a conversation: " + e.what());
  }
}

std::string JinjaChatEncoder::render(const Conversation& conv, bool add_generation_prompt) const {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  for (const Message& m : conv.messages) messages.push_back(hf_message(m));
  const bool thinking = !conv.messages.empty() && conv.messages.back().role == Role::Assistant &&
                        !conv.messages.back().reasoning.empty();
  return render_messages(messages, hf_tools(conv), add_generation_prompt, thinking);
}

std::vector<Conversation> JinjaChatEncoder::supervised_prefixes(const Conversation& conv) {
  std::vector<Conversation> out;
  for (std::size_t i = 0; i < conv.messages.size(); ++i) {
    const Message& m = conv.messages[i];
    if (m.role != Role::Assistant || !(m.loss_weight > 1e-6f)) continue;
    Conversation prefix;
    prefix.tools = conv.tools;
    prefix.messages.assign(conv.messages.begin(), conv.messages.begin() + static_cast<std::ptrdiff_t>(i + 1));
    out.push_back(std::move(prefix));
  }
  return out;
}

TokenizedExample JinjaChatEncoder::encode(const Conversation& prefix, const Tokenizer& tok, std::int64_t cutoff_len) const {
  return encode(prefix, tok, SpecialTokenEscaper(tok), cutoff_len);
}

TokenizedExample JinjaChatEncoder::encode(const Conversation& prefix, const Tokenizer& tok,
                                          const SpecialTokenEscaper& escaper, std::int64_t cutoff_len) const {
  if (prefix.messages.empty() || prefix.messages.back().role != Role::Assistant)
    throw std::invalid_argument("JinjaChatEncoder::encode: the conversation does not end with an answer");
  nlohmann::ordered_json before = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i + 1 < prefix.messages.size(); ++i) before.push_back(hf_message(prefix.messages[i], &escaper));
  nlohmann::ordered_json whole = before;
  const Message& answer = prefix.messages.back();
  whole.push_back(hf_message(answer, &escaper));
  const bool thinking = !answer.reasoning.empty();
  const ojson tools = hf_tools(prefix, &escaper);
  const std::vector<std::int32_t> prompt = tok.encode(render_messages(before, tools, true, thinking));
  std::vector<std::int32_t> ids = tok.encode(render_messages(whole, tools, false, thinking));
  if (ids.size() < prompt.size() || !std::equal(prompt.begin(), prompt.end(), ids.begin()))
    throw UsageError("the chat template of " + model_.source + " is not prefix-stable: the tokens of the messages "
                     "before an answer with its generation prompt are not the start of the tokens with the answer, so "
                     "which tokens to train is undefined (LlamaFactory v1 refuses it too)\n  hint: give a template "
                     "that renders earlier turns the same way as custom_chat_template");
  TokenizedExample ex;
  ex.weights.assign(ids.size(), 0.0f);
  std::fill(ex.weights.begin() + static_cast<std::ptrdiff_t>(prompt.size()), ex.weights.end(), answer.loss_weight);
  if (static_cast<std::int64_t>(ids.size()) > cutoff_len) {
    ids.resize(static_cast<std::size_t>(cutoff_len));
    ex.weights.resize(static_cast<std::size_t>(cutoff_len));
    ex.truncated = true;
  }
  ex.ids = std::move(ids);
  return ex;
}

}  // namespace lft::data
