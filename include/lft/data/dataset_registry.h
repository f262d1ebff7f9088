// LlamaFactory's dataset registry: `dataset: identity,alpaca_en_demo` names entries of
// `dataset_dir/dataset_info.json`, each a local file with its record format:
//   "name": {"file_name": "data.json",            relative to dataset_dir
//            "formatting": "alpaca" | "sharegpt",  default alpaca
//            "columns": {"prompt", "query", "response", "history", "system", "messages"},
//            "tags": {"role_tag", "content_tag", "user_tag", "assistant_tag", "observation_tag",
//                     "function_tag", "system_tag"},
//            "ranking": false}
// As in LlamaFactory, a `columns` (or `tags`) object replaces the defaults: a column it leaves out
// is not read. Hub datasets (hf_hub_url, ms_hub_url, ...), ranking data and folders are refused
// with the reason.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lft/data/sft_records.h"

namespace lft::data {

// The sources of `names` (in order), each limited to its first `max_samples` records (-1: all).
// `stage` "pt" reads each record's prompt column as a document. Throws lft::UsageError naming
// dataset_info.json (and the entry and key) for a missing or invalid file, an unknown name (with
// the nearest), an entry that is not a local file, ranking data, an unknown formatting, and a
// file_name that does not exist.
std::vector<DatasetSource> resolve_datasets(const std::vector<std::string>& names,
                                            const std::string& dataset_dir, const std::string& stage,
                                            std::int64_t max_samples);

}  // namespace lft::data
