#include "lft/data/jinja_sft.h"

#include <algorithm>
#include <stdexcept>

#include "lft/data/jinja_chat.h"
#include "lft/runtime/error.h"

namespace lft::data {
namespace {

// The message as v1 hands it to transformers (_to_hf_messages): its text as content, its
// reasoning as reasoning_content when it has some; in training examples both with their special
// tokens' texts escaped first (special_escape.h).
nlohmann::ordered_json hf_message(const Message& m, const SpecialTokenEscaper* escaper = nullptr) {
  const auto text = [&](const std::string& t) { return escaper != nullptr ? escaper->escape(t) : t; };
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  j["role"] = m.role == Role::Observation ? "tool" : role_name(m.role);
  j["content"] = text(m.text);
  if (!m.reasoning.empty()) j["reasoning_content"] = text(m.reasoning);
  return j;
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

std::string JinjaChatEncoder::render_messages(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                              bool enable_thinking) const {
  jinja::ChatInput in;
  in.messages = messages;
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
  return render_messages(messages, add_generation_prompt, thinking);
}

std::vector<Conversation> JinjaChatEncoder::supervised_prefixes(const Conversation& conv) {
  std::vector<Conversation> out;
  for (std::size_t i = 0; i < conv.messages.size(); ++i) {
    const Message& m = conv.messages[i];
    if (m.role != Role::Assistant || !(m.loss_weight > 1e-6f)) continue;
    Conversation prefix;
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
  const std::vector<std::int32_t> prompt = tok.encode(render_messages(before, true, thinking));
  std::vector<std::int32_t> ids = tok.encode(render_messages(whole, false, thinking));
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
