// A Llama-family decoder (Llama, Qwen2, Mistral) as a torch::nn::Module whose named_parameters()
// are exactly the Hugging Face names (model.embed_tokens.weight, model.layers.0.self_attn.q_proj
// .weight, ..., lm_head.weight), so loading, checkpoints and export are copies, not renames.
// Numerics follow transformers' modeling_llama (hf-formats notes, section 3).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/TensorOptions.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include "lft/model/model_config.h"

namespace lft::model {

// Every constructor below creates its parameters with `options` (device, dtype; default CPU
// float32): weights are zero-filled (norm weights one) until init_weights() or a checkpoint load
// gives them values.

// y = x W^T (+ b). Parameters: "weight" [out, in], and "bias" [out] when `bias`. A small holder
// rather than torch::nn::Linear, so construction does no random init and a LoRA adapter can later
// be added here as submodules without changing the parameter names.
class LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(std::int64_t in_features, std::int64_t out_features, bool bias,
             const c10::TensorOptions& options = {});
  at::Tensor forward(const at::Tensor& x);

  std::int64_t in_features;
  std::int64_t out_features;
  at::Tensor weight;
  at::Tensor bias;  // undefined without bias
};
TORCH_MODULE(Linear);

// Token embedding. Parameter "weight" [num_embeddings, dim].
class EmbeddingImpl : public torch::nn::Module {
 public:
  EmbeddingImpl(std::int64_t num_embeddings, std::int64_t dim,
                const c10::TensorOptions& options = {});
  at::Tensor forward(const at::Tensor& ids);

  at::Tensor weight;
};
TORCH_MODULE(Embedding);

// HF LlamaRMSNorm: x32 = x.float(); y = x32 * rsqrt(mean(x32^2, -1) + eps); weight * y.to(x's
// dtype). Parameter "weight" [dim].
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(std::int64_t dim, double eps, const c10::TensorOptions& options = {});
  at::Tensor forward(const at::Tensor& x);

  double eps;
  at::Tensor weight;
};
TORCH_MODULE(RMSNorm);

// Rotary position embedding in HF's rotate-half convention (dimension i pairs with i + d/2).
class RotaryEmbedding {
 public:
  explicit RotaryEmbedding(const ModelConfig& config);
  // inv_freq[i] = 1 / theta^(2i/d), i < d/2, fp32 on the CPU, with the config's rope scaling
  // (linear, llama3) applied.
  const at::Tensor& inv_freq() const { return inv_freq_; }
  // cos, sin of shape [seq_len, head_dim] for positions 0..seq_len-1, computed in fp32 and cast
  // to `options`' dtype on `options`' device. The last table is cached (per device and dtype) and
  // narrowed for shorter sequences: each row depends only on its position, so this is exact.
  // Not thread-safe (one model per thread).
  std::pair<at::Tensor, at::Tensor> cos_sin(std::int64_t seq_len,
                                            const c10::TensorOptions& options) const;

 private:
  at::Tensor inv_freq_;
  mutable at::Tensor cos_cache_, sin_cache_;
};

// rotate_half(x) = cat(-x[..., d/2:], x[..., :d/2]).
at::Tensor rotate_half(const at::Tensor& x);
// x * cos + rotate_half(x) * sin; x [B, heads, T, d], cos/sin [T, d].
at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// Grouped-query causal self-attention: q_proj, k_proj, v_proj (biases when
// config.attention_bias), o_proj (bias when config.attention_out_bias), RoPE on q and k, then
// at::scaled_dot_product_attention (causal; enable_gqa when there are fewer kv heads; an explicit
// mask for a sliding-window layer).
class LlamaAttentionImpl : public torch::nn::Module {
 public:
  LlamaAttentionImpl(const ModelConfig& config, std::int64_t layer_index,
                     const c10::TensorOptions& options = {});
  // x [B, T, hidden]; cos/sin [T, head_dim] or [B, 1, T, head_dim]; segment_mask (optional)
  // bool [B, 1, T, T] from segment_causal_mask (neat packing), else causal.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                     const at::Tensor& segment_mask = {});

  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};

 private:
  std::int64_t head_dim_, sliding_window_;
};
TORCH_MODULE(LlamaAttention);

// SwiGLU: down_proj(silu(gate_proj(x)) * up_proj(x)).
class LlamaMLPImpl : public torch::nn::Module {
 public:
  explicit LlamaMLPImpl(const ModelConfig& config, const c10::TensorOptions& options = {});
  at::Tensor forward(const at::Tensor& x);

  Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(LlamaMLP);

// Pre-norm block: h = x + self_attn(input_layernorm(x)); h + mlp(post_attention_layernorm(h)).
class LlamaDecoderLayerImpl : public torch::nn::Module {
 public:
  LlamaDecoderLayerImpl(const ModelConfig& config, std::int64_t layer_index,
                        const c10::TensorOptions& options = {});
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                     const at::Tensor& segment_mask = {});

  RMSNorm input_layernorm{nullptr};
  LlamaAttention self_attn{nullptr};
  RMSNorm post_attention_layernorm{nullptr};
  LlamaMLP mlp{nullptr};
};
TORCH_MODULE(LlamaDecoderLayer);

// Called around each decoder layer's forward by LlamaModel::forward: sharded engines gather a
// layer's parameters before it runs, free them after, and hook its output's gradient to gather
// them again before its backward.
class LayerHooks {
 public:
  virtual ~LayerHooks() = default;
  virtual void before_layer(std::int64_t index) = 0;
  virtual void after_layer(std::int64_t index, const at::Tensor& output) = 0;
};

// What every decoder layer's attention takes besides its input: RoPE tables ([T, head_dim], or
// [B, 1, T, head_dim] per segment position with neat packing) and the segment mask (undefined:
// causal).
struct AttentionInputs {
  at::Tensor cos, sin, mask;
};

// HF LlamaModel: embed_tokens, layers.{i}, norm. forward returns the final-normed hidden states.
class LlamaModelImpl : public torch::nn::Module {
 public:
  explicit LlamaModelImpl(const ModelConfig& config, const c10::TensorOptions& options = {});
  // input_ids [B, T] int64 -> hidden states [B, T, hidden]. With segment_ids [B, T] (neat
  // packing, segments.h) positions restart and attention stays within each segment.
  at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& segment_ids = {});
  // The attention inputs of a sequence of input_ids (segment_ids as above), in `options`' dtype
  // and device.
  AttentionInputs attention_inputs(const at::Tensor& input_ids, const at::Tensor& segment_ids,
                                   const c10::TensorOptions& options) const;

  Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RMSNorm norm{nullptr};
  std::vector<LlamaDecoderLayer> layer_list;  // the same modules as `layers`, typed
  bool gradient_checkpointing = false;
  LayerHooks* layer_hooks = nullptr;  // not owned

 private:
  RotaryEmbedding rotary_;
};
TORCH_MODULE(LlamaModel);

class LlamaForCausalLMImpl : public torch::nn::Module {
 public:
  explicit LlamaForCausalLMImpl(const ModelConfig& config,
                                const c10::TensorOptions& options = {});

  // input_ids [B, T] int64 -> logits [B, T, vocab] in the parameters' dtype; segment_ids as for
  // LlamaModel::forward.
  at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& segment_ids = {});
  // Final hidden states [B, T, hidden] -> logits (lm_head, or the embedding when tied).
  at::Tensor logits(const at::Tensor& hidden);

  // On: each decoder layer keeps only its input in forward and is recomputed in backward
  // (lft::model::checkpoint). Only has an effect while grad mode is on.
  void set_gradient_checkpointing(bool on) { model->gradient_checkpointing = on; }
  bool gradient_checkpointing() const { return model->gradient_checkpointing; }
  void set_layer_hooks(LayerHooks* hooks) { model->layer_hooks = hooks; }
  const ModelConfig& config() const { return config_; }

  LlamaModel model{nullptr};
  Linear lm_head{nullptr};  // null (and no lm_head.weight parameter) when tie_word_embeddings

 private:
  ModelConfig config_;
};
TORCH_MODULE(LlamaForCausalLM);

}  // namespace lft::model
