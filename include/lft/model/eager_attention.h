// Attention written out (transformers' eager_attention_forward), for what
// scaled_dot_product_attention cannot do: soft-capped scores (Gemma2). It keeps the
// [B, heads, T, T] probabilities for backward, as transformers' eager path does.
#pragma once

#include <optional>

#include <ATen/core/Tensor.h>

namespace lft::model {

// q [B, heads, T, d], k and v [B, kv_heads, T, d] (kv head g serves query heads g*r .. g*r+r-1);
// mask bool [.., T, T] (true: visible) or nullopt, then causal when `causal`.
// softmax(softcap * tanh(q k^T * scale / softcap) masked) v in the inputs' dtype, the softmax in
// float32 -> [B, heads, T, d].
at::Tensor softcapped_attention(const at::Tensor& q, at::Tensor k, at::Tensor v, const std::optional<at::Tensor>& mask,
                                bool causal, double scale, double softcap);

}  // namespace lft::model
