// LlamaFactory v1's dataset files: a YAML mapping of dataset names to entries
//   identity:
//     path: data/identity.json   # a local .json / .jsonl file, relative to the working directory
//     source: local              # v1's default, hf_hub, downloads: refused, naming the fix
//     converter: alpaca          # alpaca (instruction and input joined with nothing between),
//                                # sharegpt; none: v1's own messages records; pair: refused (DPO)
//     size: 500                  # draw this many records with replacement (v1's random.choices)
//     weight: 0.5                # then draw len * weight of them
//     split: train               # the only split of a local file
#pragma once

#include <string>
#include <vector>

#include "lft/data/sft_records.h"

namespace lft::data {

// True for a train_dataset / eval_dataset path that names a v1 dataset file (.yaml).
bool is_v1_dataset_file(const std::string& path);

// The sources of a v1 dataset file, in its order. Throws lft::UsageError naming the file, the
// entry and the key for a missing file, an unknown key or converter, a Hub source, a split other
// than train, streaming, and a bad size or weight.
std::vector<DatasetSource> read_v1_dataset_file(const std::string& file);

}  // namespace lft::data
