// The SFT / pre-training dataset the trainer reads: files -> records -> chat template -> training
// sequences (truncated, optionally packed), cached in `tokenized_path`, split into train and eval.
//
// Loss convention: the trainer computes sum(token_loss * weight) / sum(weight) over the global
// batch, where weights[b, t] is the weight of predicting input_ids[b, t + 1] from position t.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lft/data/chat_template.h"
#include "lft/data/jinja_sft.h"
#include "lft/data/sft_records.h"
#include "lft/data/sft_sequences.h"
#include "lft/data/tokenizer.h"

namespace lft::data {

struct Batch {
  at::Tensor input_ids;    // [B, T] int64; padding is the pad id
  at::Tensor weights;      // [B, T-1] float32: weight of predicting token t+1 from t; 0 = untrained
  at::Tensor segment_ids;  // [B, T] int32: tokens attend only within their segment; 0 = padding
  at::Tensor position_ids;  // [B, T] int64: position within the segment (0 for padding)
  // [B, T] bool: true on tokens, false on padding (a mixture of experts' routing statistics leave
  // the padding out); kept when segment_ids are dropped (no neat packing). Undefined: no padding.
  at::Tensor token_mask;
};

// A view of some of the sequences of a PackedSequences (shared, never copied).
class SftDataset {
 public:
  SftDataset() = default;  // empty: num_sequences() == 0
  SftDataset(std::shared_ptr<const PackedSequences> seqs, std::vector<std::int64_t> rows,
             std::int32_t pad_id);

  std::int64_t num_sequences() const { return static_cast<std::int64_t>(rows_.size()); }
  // T of batch(): cutoff_len.
  std::int64_t seq_len() const { return seqs_ ? seqs_->seq_len : 0; }
  // Tokens of sequence i before padding.
  std::int64_t length(std::int64_t i) const;
  // Sum over the attention spans of sequence i (its packed segments, or the whole sequence) of their
  // squared lengths: the query-key pairs causal attention computes, as model FLOPs count them.
  std::int64_t attention_pairs(std::int64_t i) const;
  // Index of sequence i in the underlying PackedSequences.
  std::int64_t row(std::int64_t i) const { return rows_.at(static_cast<std::size_t>(i)); }

  // The sequences `indices` as CPU tensors, padded to seq_len(), or with `pad_to_multiple_of` > 0
  // to the longest of them rounded up to a multiple of it (at most seq_len(), at least 2), as
  // LlamaFactory's collator pads. Throws std::out_of_range for a bad index.
  Batch batch(const std::vector<std::int64_t>& indices, std::int64_t pad_to_multiple_of = 0) const;
  // The length batch(indices, pad_to_multiple_of) pads to.
  std::int64_t padded_length(const std::vector<std::int64_t>& indices, std::int64_t pad_to_multiple_of) const;
  // The sequences `indices` joined end to end in one row [1, L] (LlamaFactory v1's padding_free
  // batching), each its own segments (attention and positions stay within them, and no weight
  // crosses from one to the next), padded at the end to a multiple of `pad_to_multiple_of` (> 0),
  // L at least 2.
  Batch joined_batch(const std::vector<std::int64_t>& indices, std::int64_t pad_to_multiple_of = 0) const;
  std::int64_t joined_length(const std::vector<std::int64_t>& indices, std::int64_t pad_to_multiple_of) const;

  // Sum of the weights of batch(indices), without building it.
  double weight_sum(const std::vector<std::int64_t>& indices) const;
  // Sum of weights and count of trained predictions over all sequences.
  double total_weight() const;
  std::int64_t trained_tokens() const;
  std::int64_t num_tokens() const;  // before padding
  // "999 sequences of <= 1024 tokens, 180335 tokens (82.4% padding), 124567 trained".
  std::string describe() const;

 private:
  // Sequence i into `b` from flat position `at` (of its row), its segment ids raised by
  // `segment_base`; the largest segment id it wrote.
  std::int32_t put_sequence(std::int64_t i, Batch& b, std::int64_t at, std::int32_t segment_base) const;

  std::shared_ptr<const PackedSequences> seqs_;
  std::vector<std::int64_t> rows_;
  std::int32_t pad_id_ = 0;
};

// Tokenizing split across ranks: rank r encodes conversations r, r + ranks, ..., each into
// `per_item` examples (2 for a preference pair), and `gather` (collective) returns every rank's
// examples in conversation order on every rank, or throws on every rank when any rank's `error`
// is not empty. `all_true` (collective) agrees on whether every
// rank found the cache, so all ranks take the same path. Default: one rank does everything.
struct SftParallel {
  int rank = 0;
  int ranks = 1;
  std::function<bool(bool)> all_true;
  std::function<std::vector<TokenizedExample>(std::vector<TokenizedExample> mine, const std::string& error,
                                              std::size_t per_item)>
      gather;
};

// template_name of the model's own Jinja chat template (SftOptions::jinja renders it).
inline constexpr const char* kModelTemplate = "model";

struct SftOptions {
  std::string stage = "sft";  // "sft" | "pt" | "dpo" | "rm" (dpo, rm: every conversation a preference pair)
  RecordOptions records;      // dataset_format and columns
  std::string template_name = "default";
  std::shared_ptr<const JinjaChatEncoder> jinja;  // template_name "model": the model's template
  std::int64_t cutoff_len = 1024;
  bool packing = false;
  bool neat_packing = false;  // implies packing (as LlamaFactory, with a log line)
  // Eval share: 0 none; in (0, 1) a fraction (ceil(val_size * sequences)); >= 1 a whole count.
  double val_size = 0.0;
  std::uint64_t seed = 42;
  // Cache file ("" = none; an existing folder holds "<folder>/tokenized.lftok").
  std::string tokenized_path;
  // Identifies the tokenizer in the cache key beyond name and vocabulary size: e.g.
  // file_fingerprint(tokenizer.json) (sft_cache.h).
  std::string tokenizer_fingerprint;
  bool write_cache = true;                      // false on ranks that only read the cache
  SftParallel parallel;
  std::function<void(const std::string&)> log;  // progress and cache lines (e.g. lft::log0)
};

struct SftData {
  SftDataset train;
  SftDataset eval;      // empty when val_size == 0
  std::string summary;  // the files read (or the cache used) and the sequences made, for the log
};

// Reads `paths`, encodes them with `options.template_name` and `special` (see
// ChatTemplate::resolve_special_tokens), builds the sequences (or loads them from the cache), and
// splits off eval deterministically by seed (over the final sequences, as LlamaFactory splits the
// processed dataset). Stage "pt" ignores the template: each record's first prompt is a document
// (the text; for alpaca, instruction + input, as LlamaFactory), tokenized with the tokenizer's own
// BOS/EOS (build_pretrain_sequences); special.pad pads unpacked documents. Throws lft::UsageError
// for bad options, unusable files (sft_records.h), text-only data with stage "sft", no sequence, or
// a val_size that leaves no training sequence.
SftData load_sft_data(const std::vector<DatasetSource>& sources, const SftOptions& options,
                      const Tokenizer& tok, const SpecialTokens& special);
// The files `paths`, each read with options.records.
SftData load_sft_data(const std::vector<std::string>& paths, const SftOptions& options,
                      const Tokenizer& tok, const SpecialTokens& special);

// The (train, eval) rows of `n` sequences for `val_size` and `seed`, each sorted ascending.
// Throws lft::UsageError for a negative or non-integer (>= 1) val_size or one that takes all.
std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> split_train_eval(
    std::int64_t n, double val_size, std::uint64_t seed);

}  // namespace lft::data
