// LlamaFactory v1's chat templates: qwen3_nothink (v1's default), qwen3 (an empty <think> block
// before the final answer) and chatml. Unlike the classic trainer's templates (chat_template.h),
// v1 renders each message as one segment, trains the assistant's whole segment (header and
// end-of-turn included) with the message's loss_weight, and cuts a sequence at cutoff_len from
// the end instead of shrinking prompt and response in proportion.
//   qwen3_nothink  <|im_start|>system\n{sys}<|im_end|>\n  <|im_start|>user\n{q}<|im_end|>\n
//                  <|im_start|>assistant\n{a}<|im_end|>\n   (no default system prompt)
//   qwen3          the same, the last answer after the last query as
//                  <|im_start|>assistant\n<think>\n\n</think>\n\n{a}<|im_end|>\n
//   chatml         <|im_start|>{role}\n{text}<|im_end|>\n for every message
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lft/data/sft_records.h"
#include "lft/data/sft_sequences.h"
#include "lft/data/tokenizer.h"

namespace lft::data {

struct V1Segment {
  std::string text;
  float weight = 0.0f;  // of every token of the segment
};

bool is_v1_template(const std::string& name);

// The segments of `conv` as v1 renders them. Throws std::invalid_argument for another name.
std::vector<V1Segment> v1_segments(const std::string& name, const Conversation& conv);

// The segments encoded one by one (Tokenizer::encode, special tokens as single ids) and cut to
// the first cutoff_len tokens.
TokenizedExample v1_encode(const std::string& name, const Conversation& conv, const Tokenizer& tok,
                           std::int64_t cutoff_len);

}  // namespace lft::data
