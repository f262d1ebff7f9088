// The Llama family (Llama, Qwen2, Mistral: model_type llama, qwen2, mistral): its attention, MLP
// and pre-norm decoder block, and LlamaForCausalLM, a CausalLM made of those blocks. Numerics
// follow transformers' modeling_llama (hf-formats notes, section 3).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <ATen/core/Tensor.h>
#include <c10/core/TensorOptions.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "lft/model/causal_lm.h"
#include "lft/model/layers.h"
#include "lft/model/model_config.h"

namespace lft::model {

// Grouped-query causal self-attention: q_proj, k_proj, v_proj (biases when
// config.attention_bias), o_proj (bias when config.attention_out_bias), RoPE on q and k, then
// at::scaled_dot_product_attention (causal; enable_gqa when there are fewer kv heads; an explicit
// mask for a sliding-window layer; scores scaled by 1/sqrt(query_pre_attn_scalar) when that is
// set), or softcapped_attention when config.attn_logit_softcapping > 0, or, for causal bf16 on a
// CPU without a mask, blocked_causal_attention (blocked_attention.h). Head counts are read
// from the weights, so a tensor-parallel rank that holds some of the heads runs the same code.
class LlamaAttentionImpl : public torch::nn::Module {
 public:
  LlamaAttentionImpl(const ModelConfig& config, std::int64_t layer_index,
                     const c10::TensorOptions& options = {});
  // x [B, T, hidden]; cos/sin [T, head_dim] or [B, 1, T, head_dim]; segment_mask (optional)
  // bool [B, 1, T, T] from segment_causal_mask (neat packing), else causal.
  // cp (context parallelism): x is this rank's chunk of the sequences, cos/sin the chunk's rows,
  // segment_mask the whole padded sequences'; q, k, v are exchanged for whole sequences of a share
  // of the heads around the attention itself.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                     const at::Tensor& segment_mask = {}, const ContextSplit& cp = {});
  // The tensor-parallel role of parameter `name` ("q_proj.weight").
  virtual TpSplit tp_split(const std::string& name) const;
  // Saved for backward per token on one of `tp` ranks: rotated q, k and v, the attention output
  // and its re-laid copy.
  virtual double saved_elements_per_token(int tp) const;

  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};

 protected:
  // Between the projections and RoPE: q [B, T, heads, d], k [B, T, kv_heads, d]. Llama: nothing.
  virtual void normalize_qk(at::Tensor& q, at::Tensor& k);
  // Widths of q and of k (or v) on one of `tp` tensor-parallel ranks (a replicated kv head: one).
  double q_width(int tp) const;
  double kv_width(int tp) const;

  ModelConfig config_;
  std::int64_t head_dim_, sliding_window_;
  std::optional<double> scale_;  // of the scores; none: 1/sqrt(head_dim)
};
TORCH_MODULE(LlamaAttention);

// Gated MLP: down_proj(act(gate_proj(x)) * up_proj(x)), act silu (SwiGLU) or, with
// hidden_activation gelu_pytorch_tanh, GELU's tanh approximation (GeGLU, Gemma).
class LlamaMLPImpl : public torch::nn::Module {
 public:
  // `intermediate_size` 0: config.intermediate_size (a shared expert has its own width).
  explicit LlamaMLPImpl(const ModelConfig& config, const c10::TensorOptions& options = {},
                        std::int64_t intermediate_size = 0);
  at::Tensor forward(const at::Tensor& x);
  TpSplit tp_split(const std::string& name) const;
  // Saved for backward per token: gate, up, silu(gate) and their product.
  double saved_elements_per_token(int tp) const;

  Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};

 private:
  std::int64_t intermediate_size_;
  bool gelu_tanh_;
};
TORCH_MODULE(LlamaMLP);

// Pre-norm block: h = x + self_attn(input_layernorm(x)); h + mlp(post_attention_layernorm(h)),
// with the tensor-parallel region (ops.enter ... ops.exit) around attention and around the MLP.
class LlamaDecoderLayerImpl : public DecoderBlock {
 public:
  // `attention`: a family's own attention (a LlamaAttentionImpl subclass); null: Llama's.
  LlamaDecoderLayerImpl(const ModelConfig& config, std::int64_t layer_index,
                        const c10::TensorOptions& options = {},
                        std::shared_ptr<LlamaAttentionImpl> attention = nullptr);
  at::Tensor forward(const at::Tensor& x, const AttentionInputs& in, ParallelOps& ops) override;
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                     const at::Tensor& segment_mask = {});
  TpSplit tp_split(const std::string& name) const override;
  // The two norms' normalized values and outputs and the two residual sums (the gathered
  // inputs of the column-parallel projections too with sequence parallelism), and the above.
  double saved_elements_per_token(int tp, bool sequence_parallel) const override;

  RMSNorm input_layernorm{nullptr};
  LlamaAttention self_attn{nullptr};
  RMSNorm post_attention_layernorm{nullptr};
  LlamaMLP mlp{nullptr};
};
TORCH_MODULE(LlamaDecoderLayer);

class LlamaForCausalLMImpl : public CausalLM {
 public:
  explicit LlamaForCausalLMImpl(const ModelConfig& config, const c10::TensorOptions& options = {});
};
TORCH_MODULE(LlamaForCausalLM);

}  // namespace lft::model
