// What the trainer reads, decided by the config: the tokenizer (the model folder's tokenizer.json,
// else bytes) and the sequences: stage "pt" packs text documents (PackedDataset), stage "sft"
// runs conversations through the chat template (load_sft_data), with an eval split for val_size.
// Every batch carries per-target loss weights, so one loss formula serves both stages.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lft/data/packed_dataset.h"
#include "lft/data/sft_dataset.h"
#include "lft/data/tokenizer.h"
#include "lft/train/data_options.h"

namespace lft::train {

// One training sequence before padding (TrainingData::example).
struct TrainingExample {
  std::vector<std::int64_t> ids;
  // Stage "sft": the weight of predicting ids[t + 1] from position t (ids.size() - 1 of them,
  // 0 = untrained). Stage "pt": empty (every next token is a target).
  std::vector<float> weights;
};

// For --check: reads every training and eval data file the config names (records only, no
// tokenizing) and returns one summary line per file. Throws lft::UsageError as the training run
// would for a missing file, an unknown format or converter, or a file with no usable record.
std::string check_training_data(const DataOptions& options);

class TrainingData {
 public:
  // Collective over `world` when tokenized_path is set: rank 0 tokenizes and writes the cache
  // while the others wait (under setup_timeout), then read it.
  TrainingData(const DataOptions& options, MPI_Comm world);

  const data::Tokenizer& tokenizer() const { return *tokenizer_; }
  std::int64_t num_sequences() const;
  // What the sampler draws: a sequence, or with stage dpo a preference pair (sequences 2i, the
  // chosen answer, and 2i + 1, the rejected one, always in the same micro-batch).
  bool pairs() const { return pairs_; }
  std::int64_t num_samples() const { return pairs_ ? num_sequences() / 2 : num_sequences(); }
  // The sequences of `samples`, in order (a pair's chosen then rejected).
  std::vector<std::int64_t> sequences(const std::vector<std::int64_t>& samples) const;
  std::int64_t seq_len() const;
  // Sequences `indices` of the training set: input_ids, weights (float, [B, T-1]), and
  // segment_ids when neat packing (else undefined); with joined micro-batches (padding_free) one
  // row of them end to end, each its own segment.
  data::Batch batch(const std::vector<std::int64_t>& indices) const;
  bool joins_micro_batches() const { return join_; }
  // Micro-batches are padded to their longest sequence rounded up to a multiple of this (0: to
  // seq_len()). Ranks that must see equal shapes (a tensor- or pipeline-parallel group) read the
  // same sequences, so they pad alike.
  void set_pad_to_multiple_of(std::int64_t multiple) { pad_multiple_ = multiple; }
  std::int64_t pad_to_multiple_of() const { return pad_multiple_; }
  // Tokens of the sequences `indices` before padding, and after: the micro-batch of `indices`
  // padded as batch() pads it.
  std::int64_t real_tokens(const std::vector<std::int64_t>& indices) const;
  std::int64_t padded_tokens(const std::vector<std::int64_t>& indices) const;
  // Sum of the squared lengths of their attention spans (metrics.h: model FLOPs).
  std::int64_t attention_pairs(const std::vector<std::int64_t>& indices) const;
  // The sum of batch(indices).weights, without building the batch.
  double weight_sum(const std::vector<std::int64_t>& indices) const;
  // The samples LlamaFactory main's v1 leaves out of each rank's stream (its BatchGenerator drops
  // an example cut at cutoff_len with nothing left to train): a flag per sample for the model's own
  // template's SFT examples (data::GlobalSampler::skip_samples), else empty.
  std::vector<bool> samples_main_leaves_out() const;
  bool has_eval() const { return eval_ && eval_->num_sequences() > 0; }
  const data::SftDataset& eval() const { return *eval_; }
  bool segments() const { return segments_; }
  std::string describe() const { return summary_; }
  // Training sequence i without its padding (SftDataset::length), for printing it
  // (example_print.h). Throws std::out_of_range for i outside [0, num_sequences()).
  TrainingExample example(std::int64_t i) const;

 private:
  std::unique_ptr<data::Tokenizer> tokenizer_;
  std::unique_ptr<data::PackedDataset> packed_;  // stage pt
  std::unique_ptr<data::SftDataset> train_;      // stage sft
  std::unique_ptr<data::SftDataset> eval_;
  bool segments_ = false;
  bool join_ = false;  // batching_strategy padding_free / dynamic_padding_free
  bool pairs_ = false;
  bool own_template_ = false;  // examples of the model's own Jinja template (LlamaFactory main's)
  std::int64_t pad_multiple_ = 0;
  std::string summary_;
};

}  // namespace lft::train
