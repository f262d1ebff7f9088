// Qwen3 (model_type qwen3, Qwen3ForCausalLM): Llama's block with an RMSNorm over each head's q
// and k (q_norm, k_norm [head_dim], with rms_norm_eps) between the projections and RoPE, an
// explicit head_dim, and no q/k/v bias unless attention_bias (which then also gives o_proj one).
#pragma once

#include <cstdint>
#include <string>

#include "lft/model/causal_lm.h"
#include "lft/model/families.h"
#include "lft/model/llama.h"

namespace lft::model {

class Qwen3AttentionImpl : public LlamaAttentionImpl {
 public:
  Qwen3AttentionImpl(const ModelConfig& config, std::int64_t layer_index, const c10::TensorOptions& options = {});
  // q_norm and k_norm act on this rank's heads: replicated, their gradient summed over tp.
  TpSplit tp_split(const std::string& name) const override;
  // Llama's, and each q/k norm's input and normalized value.
  double saved_elements_per_token(int tp) const override;

  RMSNorm q_norm{nullptr}, k_norm{nullptr};

 protected:
  void normalize_qk(at::Tensor& q, at::Tensor& k) override;
};

class Qwen3ForCausalLMImpl : public CausalLM {
 public:
  explicit Qwen3ForCausalLMImpl(const ModelConfig& config, const c10::TensorOptions& options = {});
};
TORCH_MODULE(Qwen3ForCausalLM);

FamilySpec qwen3_family();

}  // namespace lft::model
