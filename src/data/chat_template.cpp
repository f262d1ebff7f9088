#include "lft/data/chat_template.h"

#include <stdexcept>
#include <utility>

#include "lft/data/v1_render.h"
#include "lft/runtime/error.h"

namespace lft::data {
namespace {

const std::string kContent = "{content}";

std::string fill(const std::string& slot, const std::string& content) {
  const std::size_t at = slot.find(kContent);
  if (at == std::string::npos) return slot;
  return slot.substr(0, at) + content + slot.substr(at + kContent.size());
}

// An optional system message, then (user|observation, assistant) pairs.
void check_shape(const Conversation& conv) {
  const auto& m = conv.messages;
  const std::size_t first = !m.empty() && m[0].role == Role::System ? 1 : 0;
  const std::size_t turns = m.size() - first;
  if (turns == 0 || turns % 2 != 0) {
    throw std::invalid_argument(
        "ChatTemplate: a conversation needs (prompt, response) pairs, got " +
        std::to_string(turns) + " messages after the system prompt");
  }
  for (std::size_t i = first; i < m.size(); ++i) {
    const bool prompt = (i - first) % 2 == 0;
    const bool ok = prompt ? (m[i].role == Role::User || m[i].role == Role::Observation)
                           : m[i].role == Role::Assistant;
    if (!ok) {
      throw std::invalid_argument("ChatTemplate: message " + std::to_string(i + 1) + " is " +
                                  role_name(m[i].role) + ", out of turn");
    }
  }
}

}  // namespace

const std::vector<std::string>& ChatTemplate::names() {
  static const std::vector<std::string> names{"llama3", "qwen", "mistral", "default", "qwen3_nothink", "qwen3", "chatml"};
  return names;
}

ChatTemplate::ChatTemplate(const std::string& name) : name_(name) {
  const Slot bos{Slot::kBos, ""};
  const Slot eos{Slot::kEos, ""};
  auto text = [](std::string s) { return Slot{Slot::kText, std::move(s)}; };
  if (is_v1_template(name)) {
    v1_ = true;  // rendered by v1_render.cpp
    eos_word_ = "<|im_end|>";
    special_words_ = {"<|im_start|>", "<|im_end|>"};
  } else if (name == "llama3") {
    prefix_ = {bos};
    system_ = {text("<|start_header_id|>system<|end_header_id|>\n\n{content}<|eot_id|>")};
    user_ = {
        text("<|start_header_id|>user<|end_header_id|>\n\n{content}<|eot_id|>"
             "<|start_header_id|>assistant<|end_header_id|>\n\n")};
    assistant_ = {text("{content}<|eot_id|>")};
    observation_ = {
        text("<|start_header_id|>ipython<|end_header_id|>\n\n{content}<|eot_id|>"
             "<|start_header_id|>assistant<|end_header_id|>\n\n")};
    eos_word_ = "<|eot_id|>";
    special_words_ = {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
  } else if (name == "qwen") {
    system_ = {text("<|im_start|>system\n{content}<|im_end|>\n")};
    user_ = {text("<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n")};
    assistant_ = {text("{content}<|im_end|>\n")};
    observation_ = {
        text("<|im_start|>user\n<tool_response>\n{content}\n</tool_response>"
             "<|im_end|>\n<|im_start|>assistant\n")};
    default_system_ = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
    eos_word_ = "<|im_end|>";
    special_words_ = {"<|im_start|>", "<|im_end|>"};
  } else if (name == "mistral") {
    prefix_ = {bos};
    system_ = {text("{content}\n\n")};
    user_ = {text("[INST] {content}[/INST]")};
    assistant_ = {text(" {content}"), eos};
    observation_ = {text("[TOOL_RESULTS] {\"content\": {content}}[/TOOL_RESULTS]")};
    system_in_first_user_ = true;
  } else if (name == "default") {
    system_ = {text("System: {content}"), eos, text("\n")};
    user_ = {text("Human: {content}"), eos, text("\nAssistant:")};
    assistant_ = {text("{content}"), eos, text("\n")};
    observation_ = user_;
  } else {
    std::string known;
    for (const std::string& n : names()) known += (known.empty() ? "" : ", ") + n;
    throw UsageError("unknown template \"" + name + "\"; this build has " + known);
  }
}

SpecialTokens ChatTemplate::resolve_special_tokens(const Tokenizer& tok,
                                                   const TokenIdFn& token_id) const {
  SpecialTokens s{tok.bos_id(), tok.eos_id(), tok.pad_id()};
  const std::string who = "template \"" + name_ + "\" with the " + tok.name() + " tokenizer: ";
  if (token_id) {
    for (const std::string& word : special_words_) {
      if (token_id(word) < 0) {
        throw UsageError(who + "the tokenizer has no token \"" + word +
                         "\", which the template writes; use this model family's tokenizer or "
                         "another template (lftrain does not add tokens to the vocabulary)");
      }
    }
    if (!eos_word_.empty()) s.eos = token_id(eos_word_);
  }
  bool needs_eos = false;
  for (const Slots* slots : {&prefix_, &system_, &user_, &assistant_, &observation_}) {
    for (const Slot& slot : *slots) needs_eos = needs_eos || slot.kind == Slot::kEos;
  }
  if (needs_eos && s.eos < 0) {
    throw UsageError(who + "the template ends turns with EOS and the tokenizer has none");
  }
  if (s.pad < 0) s.pad = s.eos;
  if (s.pad < 0)
    throw UsageError(who + "the tokenizer has neither a PAD nor an EOS token to pad with");
  return s;
}

template <class Emit, class TurnEnd>
void ChatTemplate::walk(const Conversation& conv, Emit&& emit, TurnEnd&& turn_end) const {
  check_shape(conv);
  const auto& m = conv.messages;
  const std::size_t first = m[0].role == Role::System ? 1 : 0;
  const std::string& system = first == 1 && !m[0].text.empty() ? m[0].text : default_system_;
  for (std::size_t i = first; i < m.size(); ++i) {
    std::string content = m[i].text;
    if (i == first) {
      for (const Slot& slot : prefix_) emit(slot, "");
      if (!system.empty()) {
        // Llama2Template: the system text is written into the first user turn.
        if (!system_in_first_user_) {
          for (const Slot& slot : system_) emit(slot, system);
        } else if (m[i].role == Role::User) {
          content = fill(system_.front().text, system) + content;
        }
      }
    }
    const Slots& slots = m[i].role == Role::Assistant ? assistant_
                         : m[i].role == Role::User    ? user_
                                                      : observation_;
    for (const Slot& slot : slots) emit(slot, content);
    turn_end(i - first);
  }
}

std::vector<EncodedTurn> ChatTemplate::encode(const Conversation& conv, const Tokenizer& tok,
                                              const SpecialTokens& special) const {
  if (v1_) throw std::logic_error("ChatTemplate::encode: \"" + name_ + "\" is a v1 template; use v1_encode");
  std::vector<EncodedTurn> turns;
  std::vector<std::int32_t> ids;
  auto emit = [&](const Slot& slot, const std::string& content) {
    if (slot.kind == Slot::kText) {
      const std::string s = fill(slot.text, content);
      if (s.empty()) return;
      const std::vector<std::int32_t> piece = tok.encode(s);
      ids.insert(ids.end(), piece.begin(), piece.end());
    } else if (slot.kind == Slot::kBos) {
      if (special.bos >= 0) ids.push_back(special.bos);
    } else {
      if (special.eos < 0) {
        throw UsageError("template \"" + name_ + "\" ends turns with EOS; the " + tok.name() +
                         " tokenizer has none");
      }
      ids.push_back(special.eos);
    }
  };
  const std::size_t first = !conv.messages.empty() && conv.messages[0].role == Role::System;
  auto turn_end = [&](std::size_t k) {
    if (k % 2 == 0) {
      turns.push_back({std::move(ids), {}, conv.messages[first + k + 1].loss_weight});
    } else {
      turns.back().target = std::move(ids);
    }
    ids.clear();
  };
  walk(conv, emit, turn_end);
  return turns;
}

std::string ChatTemplate::render(const Conversation& conv, const std::string& bos,
                                 const std::string& eos) const {
  std::string out;
  if (v1_) {
    for (const V1Segment& segment : v1_segments(name_, conv)) out += segment.text;
    return out;
  }
  auto emit = [&](const Slot& slot, const std::string& content) {
    out += slot.kind == Slot::kText  ? fill(slot.text, content)
           : slot.kind == Slot::kBos ? bos
                                     : eos;
  };
  walk(conv, emit, [](std::size_t) {});
  return out;
}

}  // namespace lft::data
