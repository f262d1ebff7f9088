// What a `batching_strategy` value (LlamaFactory v1's names) asks of the batches: every layer that
// branches on it decodes it here.
#pragma once

#include <string>

namespace lft::config {

// dynamic_batching, dynamic_padding_free: each data-parallel rank cuts its own stream of samples
// into micro-batches by a token budget.
inline bool batches_by_tokens(const std::string& strategy) {
  return strategy == "dynamic_batching" || strategy == "dynamic_padding_free";
}

// padding_free, dynamic_padding_free: each micro-batch's samples joined end to end in one row.
inline bool joins_micro_batches(const std::string& strategy) {
  return strategy == "padding_free" || strategy == "dynamic_padding_free";
}

}  // namespace lft::config
