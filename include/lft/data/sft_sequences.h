// Tokenized examples -> training sequences of at most cutoff_len tokens: LlamaFactory's
// truncation (infer_seqlen), packing (greedy_knapsack) and pre-training blocks.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lft/data/chat_template.h"
#include "lft/data/tokenizer.h"

namespace lft::data {

// One example: ids and, per token, the weight of predicting it from the token before (0 =
// prompt, not trained).
struct TokenizedExample {
  std::vector<std::int32_t> ids;
  std::vector<float> weights;
  bool truncated = false;
};

// LlamaFactory's infer_seqlen: how many (source, target) tokens of one turn fit in `cutoff_len`.
// The target keeps all its tokens when 2*target < cutoff_len, else the source does when
// 2*source < cutoff_len, else both shrink in proportion.
std::pair<std::int64_t, std::int64_t> infer_seqlen(std::int64_t source_len, std::int64_t target_len,
                                                   std::int64_t cutoff_len);

// The turns in order, each cut by infer_seqlen to the room left (the start of a source and of a
// target is kept); turns after the room is used up are dropped. Source tokens weigh 0, target
// tokens the turn's weight.
TokenizedExample flatten_turns(const std::vector<EncodedTurn>& turns, std::int64_t cutoff_len);

// A preference pair as LlamaFactory's pairwise processor makes it: the prompt is every turn of
// `chosen` but the last answer (history answers included, weight 0); infer_seqlen cuts the
// prompt and both answers to fit cutoff_len with the longer answer as the target length. `chosen`
// and `rejected` are the same conversation with another last answer. Returns (chosen, rejected).
std::pair<TokenizedExample, TokenizedExample> flatten_pair(const std::vector<EncodedTurn>& chosen,
                                                           const std::vector<EncodedTurn>& rejected,
                                                           std::int64_t cutoff_len);

// LlamaFactory's greedy_knapsack over `lengths` (each <= capacity): every bin repeatedly takes the
// longest remaining item that still fits (among equal lengths the latest index). Returns the item
// indices of each bin, in the order taken. Deterministic.
std::vector<std::vector<std::int64_t>> greedy_knapsack(const std::vector<std::int64_t>& lengths,
                                                       std::int64_t capacity);

struct SequenceStats {
  std::int64_t examples = 0;           // conversations or documents given
  std::int64_t truncated = 0;          // examples cut to cutoff_len
  std::int64_t dropped_untrained = 0;  // examples left with no trained token (all weights 0)
  std::int64_t dropped_tokens = 0;     // pre-training: the incomplete tail of the stream
};

// Training sequences stored back to back; sequence i is [offsets[i], offsets[i+1]) (at most
// seq_len tokens; the rest of a row is padding).
struct PackedSequences {
  std::int64_t seq_len = 0;
  std::vector<std::int64_t> offsets{0};
  std::vector<std::int32_t> tokens;
  std::vector<float> weights;          // weight of predicting this token from the previous one
  std::vector<std::int32_t> segments;  // >= 1: which sample of its sequence the token belongs to
  SequenceStats stats;

  std::int64_t num_sequences() const { return static_cast<std::int64_t>(offsets.size()) - 1; }
  std::int64_t length(std::int64_t i) const { return offsets[i + 1] - offsets[i]; }
};

// SFT sequences. Without packing, one example per sequence (segment 1). With packing, the
// examples are binned by greedy_knapsack into sequences of at most cutoff_len; every example
// weighs 0 on its first token (nothing across samples is trained); segments are 1 for every token
// (one causal attention over the sequence, as LlamaFactory's `packing`) or, with `neat`, the
// 1-based sample number (attention and positions kept within a sample, as `neat_packing`).
// Examples are truncated to cutoff_len (never split) and those without a trained token dropped,
// unless `keep_untrained` (LlamaFactory v1 keeps them in its batches).
PackedSequences build_sft_sequences(std::vector<TokenizedExample> examples, std::int64_t cutoff_len,
                                    bool packing, bool neat, bool keep_untrained = false);

// Pre-training sequences, BOS + document + EOS per document (a tokenizer without one omits it),
// every token trained. With packing (PackedDataset's stream): all documents concatenated and cut
// into sequences of exactly cutoff_len, the tail dropped; with `neat` the segment restarts at each
// document (predicting a document's first token is not trained). Without packing: one document
// per sequence, truncated to cutoff_len. Throws lft::UsageError (naming `source`) when packing
// yields no sequence, std::out_of_range for an id outside the tokenizer's vocabulary.
PackedSequences build_pretrain_sequences(const std::vector<std::string>& docs, const Tokenizer& tok,
                                         std::int64_t cutoff_len, bool packing, bool neat,
                                         const std::string& source);

}  // namespace lft::data
