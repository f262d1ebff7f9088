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

#include "lft/config/config.h"
#include "lft/data/packed_dataset.h"
#include "lft/data/sft_dataset.h"
#include "lft/data/tokenizer.h"

namespace lft::train {

class TrainingData {
 public:
  // Collective over `world` when tokenized_path is set: rank 0 tokenizes and writes the cache
  // while the others wait (under setup_timeout), then read it.
  TrainingData(const config::Config& cfg, MPI_Comm world);

  const data::Tokenizer& tokenizer() const { return *tokenizer_; }
  std::int64_t num_sequences() const;
  std::int64_t seq_len() const;
  // Sequences `indices` of the training set: input_ids, weights (float, [B, T-1]), and
  // segment_ids when neat packing (else undefined).
  data::Batch batch(const std::vector<std::int64_t>& indices) const;
  // The sum of batch(indices).weights, without building the batch.
  double weight_sum(const std::vector<std::int64_t>& indices) const;
  bool has_eval() const { return eval_ && eval_->num_sequences() > 0; }
  const data::SftDataset& eval() const { return *eval_; }
  bool segments() const { return segments_; }
  std::string describe() const { return summary_; }

 private:
  std::unique_ptr<data::Tokenizer> tokenizer_;
  std::unique_ptr<data::PackedDataset> packed_;  // stage pt
  std::unique_ptr<data::SftDataset> train_;      // stage sft
  std::unique_ptr<data::SftDataset> eval_;
  bool segments_ = false;
  std::string summary_;
};

}  // namespace lft::train
