// Seeing the data: a training sequence printed as LlamaFactory prints its first example
// (data/loader.py, SupervisedDatasetProcessor.print_data_example), in the start-up log and by
// `lftrain --print-example N`:
//   input_ids:\n[1, 2, 3]            the ids, a Python list
//   inputs:\n<text>                  decoded with special tokens kept
//   label_ids:\n[-100, 2, 3]         the label of each position, -100 where it is not trained
//   labels:\n<masked: 1 token>...    decoded, each run of masked positions shown as a placeholder
// (LlamaFactory drops the masked labels before decoding; lftrain shows where they were).
// Stage pt prints input_ids and inputs only, as LlamaFactory does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lft/data/tokenizer.h"

namespace lft::train {

class TrainingData;

// The lines above (without a trailing newline) for one sequence: `ids` (its tokens, without
// padding) and `weights`, the weight of predicting ids[t + 1] from position t (ids.size() - 1
// of them, 0 = untrained), or empty for pre-training data (then no label lines). Labels are
// aligned as LlamaFactory's: label_ids[0] = -100 and label_ids[t] = ids[t] when weights[t - 1]
// > 0, else -100 (the shift happens in the loss).
//
// Special tokens are kept, as LlamaFactory decodes with skip_special_tokens=False: a token
// that Tokenizer::decode skips is spelled as tokenizer.json spells it ("<|eot_id|>") for a
// Hugging Face tokenizer, else "<bos>", "<eos>", "<pad>" (the byte tokenizer) or "<id N>"; the
// text between special tokens is decoded run by run.
// Throws std::invalid_argument when weights is neither empty nor ids.size() - 1 long, and
// std::out_of_range for an id outside the tokenizer's vocabulary.
std::string format_example(const data::Tokenizer& tokenizer, const std::vector<std::int64_t>& ids,
                           const std::vector<float>& weights);

// `heading` ("training example:") on its own line, then format_example of training sequence
// `index` of `data` (TrainingData::example); with `pretraining` (stage "pt", whichever way the
// data was read) without the label lines, as LlamaFactory. Throws std::out_of_range for a bad
// index.
std::string format_training_example(const TrainingData& data, std::int64_t index, const std::string& heading,
                                    bool pretraining);

}  // namespace lft::train
