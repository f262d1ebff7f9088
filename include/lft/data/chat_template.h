// LlamaFactory's chat templates (src/llamafactory/data/template.py): how a conversation becomes
// token ids, and which of them are trained.
//
// A template is a list of slots per role; a slot is text with a {content} placeholder, or the BOS
// or EOS token. Each text slot is encoded on its own with Tokenizer::encode, as LlamaFactory
// does, so special tokens written in a slot ("<|eot_id|>") become one id when the tokenizer knows
// them as added tokens (and plain text with ByteTokenizer).
//   llama3   <bos> [<|start_header_id|>system<|end_header_id|>\n\n{sys}<|eot_id|>]
//            <|start_header_id|>user<|end_header_id|>\n\n{q}<|eot_id|>
//            <|start_header_id|>assistant<|end_header_id|>\n\n  |  {a}<|eot_id|>
//   qwen     <|im_start|>system\n{sys}<|im_end|>\n  (default system: "You are Qwen, ...")
//            <|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n  |  {a}<|im_end|>\n
//   mistral  <bos>[INST] {sys}\n\n{q}[/INST]  |   {a}<eos>   (system inside the first user turn)
//   default  System: {sys}<eos>\n  Human: {q}<eos>\nAssistant:  |  {a}<eos>\n
// ("|" separates the prompt from the trained response of one turn.)
// Masking (LlamaFactory's defaults: train_on_prompt = false, mask_history = false): every prompt
// token weighs 0; every assistant turn, its end-of-turn tokens included, weighs the message's
// loss_weight.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lft/data/sft_records.h"
#include "lft/data/tokenizer.h"

namespace lft::data {

// The ids a template emits for its {bos}/{eos} slots, and the padding id. -1: none.
struct SpecialTokens {
  std::int32_t bos = -1;
  std::int32_t eos = -1;
  std::int32_t pad = -1;
};

// Looks a token string up in the tokenizer's vocabulary (added tokens included); -1 when absent.
// HfTokenizer::token_id fits.
using TokenIdFn = std::function<std::int32_t(const std::string&)>;

// One prompt-response pair of a conversation.
struct EncodedTurn {
  std::vector<std::int32_t> source;  // prompt: template scaffolding, system, user / observation
  std::vector<std::int32_t> target;  // the assistant response with its end-of-turn tokens
  float weight = 1.0f;               // the response's loss_weight
};

class ChatTemplate {
 public:
  // Throws lft::UsageError for an unknown name, listing the known ones.
  explicit ChatTemplate(const std::string& name);

  static const std::vector<std::string>& names();  // llama3, qwen, mistral, default
  const std::string& name() const { return name_; }

  // Special tokens as LlamaFactory's fix_special_tokens leaves them: bos = the tokenizer's; eos =
  // the template's first stop word for llama3 ("<|eot_id|>") and qwen ("<|im_end|>"), else the
  // tokenizer's; pad = the tokenizer's, else eos. Each special string the template writes in its
  // slots must be one token of the tokenizer. With `token_id` empty, the tokenizer's own
  // bos/eos/pad are taken and nothing is checked (for ByteTokenizer). Throws lft::UsageError
  // naming the missing token (LlamaFactory would add it and resize the vocabulary; lftrain does
  // not), when the template needs an EOS the tokenizer lacks, or when there is neither PAD nor EOS.
  SpecialTokens resolve_special_tokens(const Tokenizer& tok, const TokenIdFn& token_id) const;

  // The prompt-response pairs of `conv`, in order. A {bos} slot emits nothing when special.bos is
  // -1 (as in LlamaFactory). Throws std::invalid_argument when `conv` is not an optional system
  // message then (user|observation, assistant) pairs, lft::UsageError when the template has an
  // {eos} slot and special.eos is -1.
  std::vector<EncodedTurn> encode(const Conversation& conv, const Tokenizer& tok,
                                  const SpecialTokens& special) const;

  // The text the template makes of `conv`, with `bos` and `eos` written for those slots (for logs
  // and tests; a tokenizer without BOS gets "" for bos).
  std::string render(const Conversation& conv, const std::string& bos = "<s>",
                     const std::string& eos = "</s>") const;

  // A LlamaFactory v1 template (qwen3_nothink, qwen3, chatml): encode() does not apply (examples
  // come from v1_encode, v1_render.h), and examples left with no trained token are kept, as v1
  // keeps them.
  bool is_v1() const { return v1_; }

 private:
  struct Slot {
    enum Kind { kText, kBos, kEos } kind = kText;
    std::string text;  // with "{content}" where the message goes
  };
  using Slots = std::vector<Slot>;

  // Calls emit(slot, content) for every slot of every message; `turn_end(i)` after message i.
  template <class Emit, class TurnEnd>
  void walk(const Conversation& conv, Emit&& emit, TurnEnd&& turn_end) const;

  std::string name_;
  Slots prefix_, system_, user_, assistant_, observation_;
  std::string default_system_;
  std::string eos_word_;                    // replaces the tokenizer's EOS when non-empty
  std::vector<std::string> special_words_;  // must be single tokens of the tokenizer
  bool system_in_first_user_ = false;       // mistral (LlamaFactory's Llama2Template)
  bool v1_ = false;
};

}  // namespace lft::data
