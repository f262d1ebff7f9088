// Gemma2 (model_type gemma2, Gemma2ForCausalLM): Llama's attention and gated MLP with Gemma's
// hooks: embeddings scaled by sqrt(hidden_size), RMSNorms that scale by (1 + weight), a GELU-tanh
// MLP, scores scaled by 1/sqrt(query_pre_attn_scalar) and soft-capped, a sliding window on the
// layers `layer_types` names, the final logits soft-capped, the head tied to the embedding. The
// block has two more norms than Llama's: post_attention_layernorm normalizes the attention's
// output before the residual sum, pre_/post_feedforward_layernorm sit around the MLP.
// Numerics follow transformers' modeling_gemma2 (eager attention).
#pragma once

#include <cstdint>

#include "lft/model/causal_lm.h"
#include "lft/model/families.h"
#include "lft/model/llama.h"

namespace lft::model {

class Gemma2DecoderLayerImpl : public LlamaDecoderLayerImpl {
 public:
  Gemma2DecoderLayerImpl(const ModelConfig& config, std::int64_t layer_index, const c10::TensorOptions& options = {});
  // h = x + post_attention_layernorm(attn(input_layernorm(x)));
  // h + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(h)))
  at::Tensor forward(const at::Tensor& x, const AttentionInputs& in, ParallelOps& ops) override;
  // Llama's, and the two more norms' inputs and normalized values.
  double saved_elements_per_token(int tp, bool sequence_parallel) const override;

  RMSNorm pre_feedforward_layernorm{nullptr}, post_feedforward_layernorm{nullptr};
};

class Gemma2ForCausalLMImpl : public CausalLM {
 public:
  explicit Gemma2ForCausalLMImpl(const ModelConfig& config, const c10::TensorOptions& options = {});
};
TORCH_MODULE(Gemma2ForCausalLM);

FamilySpec gemma2_family();

}  // namespace lft::model
