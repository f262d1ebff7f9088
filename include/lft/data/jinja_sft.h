// Supervised examples from a model's own Jinja chat template, as LlamaFactory main's v1 makes them
// (v1/core/rendering: a file without `template`; docs/data.md, "The model's chat template"):
//  - a conversation gives one example per assistant message with a loss_weight above 1e-6: the
//    messages up to it, trained on that answer only (the earlier answers are prompt);
//  - the example is the template's text of those messages (add_generation_prompt false), and its
//    prompt the text of the messages before the answer with add_generation_prompt true; every
//    token after the prompt's tokens is trained with the answer's loss_weight (its end-of-turn
//    tokens and what the template writes after them included); a template whose prompt is not a
//    prefix of the whole is refused, as v1 refuses it;
//  - an answer's tool calls as tool_calls, the conversation's tool definitions as tools;
//  - each message's text and reasoning, the string values of each tool call's arguments and the
//    text of the tools with their special tokens' texts escaped first, as main does
//    (special_escape.h);
//  - enable_thinking is true exactly when the answer carries reasoning (`reasoning_content`);
//  - each text encoded whole (Tokenizer::encode: special tokens as single ids, no BOS added: the
//    template writes what it wants), then cut to its first cutoff_len tokens (an example left with
//    nothing to train is kept: main drops it from each rank's stream after the shuffle, which the
//    sampler does: data::GlobalSampler::skip_samples).
#pragma once

#include <cstdint>
#include <vector>

#include "lft/data/jinja.h"
#include "lft/data/model_chat_template.h"
#include "lft/data/special_escape.h"
#include "lft/data/sft_records.h"
#include "lft/data/sft_sequences.h"
#include "lft/data/tokenizer.h"

namespace lft::data {

class JinjaChatEncoder {
 public:
  // Parses the template; throws lft::UsageError naming its source and line when it cannot.
  explicit JinjaChatEncoder(ModelChatTemplate model);

  // The conversations v1 trains on of `conv`: its messages up to each answer that trains.
  static std::vector<Conversation> supervised_prefixes(const Conversation& conv);

  // The example of a supervised prefix, trained on its last message (an answer). Throws
  // lft::UsageError when the template raises, or renders a prompt that is not a prefix of the
  // example.
  TokenizedExample encode(const Conversation& prefix, const Tokenizer& tok, std::int64_t cutoff_len) const;
  // The same with `tok`'s escaper made once by the caller (a dataset's examples share it).
  TokenizedExample encode(const Conversation& prefix, const Tokenizer& tok, const SpecialTokenEscaper& escaper,
                          std::int64_t cutoff_len) const;

  // The text of `conv` whole (for logs and tests).
  std::string render(const Conversation& conv, bool add_generation_prompt) const;

  const std::string& source() const { return model_.source; }
  const std::string& text() const { return model_.text; }

 private:
  std::string render_messages(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                              bool add_generation_prompt, bool enable_thinking) const;

  ModelChatTemplate model_;
  jinja::Template template_;
};

}  // namespace lft::data
