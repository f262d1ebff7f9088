// What the training data is, decoded once from the configuration (data_config.cpp, the decoder):
// the files or dataset_info.json names to read, how records are read, templated, cut and packed,
// and the tokenizer. TrainingData and `lftrain --check`'s data summary read these, not the keys.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lft/config/config.h"

namespace lft::train {

struct DataOptions {
  std::string stage = "sft";                // pt | sft | dpo | rm
  std::string model_folder;                 // model_name_or_path ("" for an inline [model])
  std::string model_folder_where;           // its location, for messages
  bool bytes_tokenizer = false;             // tokenizer = "bytes"
  std::string template_name;                // template
  std::string custom_chat_template;         // template "model": a Jinja template in place of the model's
  std::string dataset_format;               // dataset_format
  bool use_dataset = false;                 // `dataset` given: dataset_info.json names, not train_dataset files
  std::vector<std::string> train_files;     // train_dataset (files, v1 dataset files)
  std::vector<std::string> dataset_names;   // dataset: the names, each list element split at commas
  std::string dataset_dir;                  // dataset_dir
  bool has_eval_dataset = false;            // eval_dataset given
  std::vector<std::string> eval_entries;    // eval_dataset as given (files, or names)
  std::vector<std::string> eval_names;      // the same split into names
  std::int64_t max_samples = -1;            // per file; -1: every record
  std::int64_t cutoff_len = 0;
  bool packing = false;                     // packing or neat_packing
  bool packing_set = false;                 // packing given (stage pt packs by default)
  bool neat_packing = false;
  // batching_strategy padding_free or dynamic_padding_free: each micro-batch's samples joined end
  // to end into one row (LlamaFactory v1's _pack_padding_free_samples).
  bool join_micro_batches = false;
  double val_size = 0;
  std::uint64_t seed = 0;
  std::string tokenized_path;               // "" when not set
  // An evaluation set with stage pt (refused: pre-training data is one packed stream): the key
  // that asks for it and where ("" when none).
  std::string eval_key, eval_where;
};

// The data options of `cfg`.
DataOptions data_options(const config::Config& cfg);

}  // namespace lft::train
