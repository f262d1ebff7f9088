// Next-token cross-entropy, per token, in fp32 (as transformers' ForCausalLMLoss: logits.float()).
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace lft::model {

// Per-token loss [B, T-1] (float32) for predicting input_ids[:, 1:] from logits[:, :-1]:
// -log_softmax(logits[b, t])[input_ids[b, t+1]], computed in fp32 whatever the logits' dtype,
// and exactly 0 where the target input_ids[b, t+1] == ignore_id (padding). Differentiable w.r.t.
// logits. logits [B, T, V], input_ids [B, T] int64.
at::Tensor token_losses(const at::Tensor& logits, const at::Tensor& input_ids,
                        std::int64_t ignore_id);

// Per-position loss [B, T] (float32) of logits [B, T, V] predicting targets [B, T] (int64), 0
// where the target == ignore_id; what token_losses computes on logits[:, :-1], input_ids[:, 1:].
at::Tensor target_losses(const at::Tensor& logits, const at::Tensor& targets, std::int64_t ignore_id);

// [B, T-1] bool: true where the target input_ids[:, 1:] != ignore_id (the tokens that count).
at::Tensor target_mask(const at::Tensor& input_ids, std::int64_t ignore_id);

}  // namespace lft::model
