// The Llama-family decoder: layers (Linear, Embedding, RMSNorm), RoPE, attention, MLP, model.
#include "lft/model/llama.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <ATen/ATen.h>

#include "lft/model/checkpoint.h"
#include "lft/model/parameter_storage.h"
#include "lft/model/segments.h"

namespace lft::model {

namespace {

constexpr double kPi = 3.141592653589793;  // Python's math.pi

c10::TensorOptions param_options(const c10::TensorOptions& options) {
  return options.dtype(options.dtype_opt().value_or(caffe2::TypeMeta::Make<float>()))
      .requires_grad(false);
}

// Filled with `value`, or without memory inside an UnallocatedParameters scope.
at::Tensor new_parameter(const std::vector<std::int64_t>& shape, const c10::TensorOptions& options,
                         double value) {
  if (UnallocatedParameters::active()) return unallocated_tensor(shape, param_options(options));
  return at::full(shape, value, param_options(options));
}

}  // namespace

// ---- Linear, Embedding, RMSNorm ----

LinearImpl::LinearImpl(std::int64_t in, std::int64_t out, bool with_bias,
                       const c10::TensorOptions& options)
    : in_features(in), out_features(out) {
  weight = register_parameter("weight", new_parameter({out, in}, options, 0.0));
  if (with_bias) bias = register_parameter("bias", new_parameter({out}, options, 0.0));
}

at::Tensor LinearImpl::forward(const at::Tensor& x) { return at::linear(x, weight, bias); }

EmbeddingImpl::EmbeddingImpl(std::int64_t num_embeddings, std::int64_t dim,
                             const c10::TensorOptions& options) {
  weight = register_parameter("weight", new_parameter({num_embeddings, dim}, options, 0.0));
}

at::Tensor EmbeddingImpl::forward(const at::Tensor& ids) { return at::embedding(weight, ids); }

RMSNormImpl::RMSNormImpl(std::int64_t dim, double epsilon, const c10::TensorOptions& options)
    : eps(epsilon) {
  weight = register_parameter("weight", new_parameter({dim}, options, 1.0));
}

at::Tensor RMSNormImpl::forward(const at::Tensor& x) {
  const at::Tensor x32 = x.to(at::kFloat);
  const at::Tensor variance = x32.pow(2).mean(-1, /*keepdim=*/true);
  const at::Tensor y = x32 * at::rsqrt(variance + eps);
  return weight * y.to(x.scalar_type());
}

// ---- RoPE ----

RotaryEmbedding::RotaryEmbedding(const ModelConfig& config) {
  // Written with the same tensor operations, in the same order, as transformers'
  // _compute_default_rope_parameters / _compute_llama3_parameters, so the fp32 values agree bit
  // for bit (Python's `1.0 / t` is reciprocal(t) * 1.0).
  const std::int64_t dim = config.head_dim();
  const at::Tensor exponent =
      at::arange(0, dim, 2, at::TensorOptions().dtype(at::kLong)).to(at::kFloat) /
      static_cast<double>(dim);
  at::Tensor inv = at::reciprocal(at::pow(config.rope_theta, exponent)) * 1.0;
  if (config.rope_type == "linear") {
    inv = inv / config.rope_factor;
  } else if (config.rope_type == "llama3") {
    const double factor = config.rope_factor, low = config.rope_low_freq_factor,
                 high = config.rope_high_freq_factor;
    const double old_len = static_cast<double>(config.rope_original_max_position_embeddings > 0
                                                   ? config.rope_original_max_position_embeddings
                                                   : config.max_position_embeddings);
    const double low_freq_wavelen = old_len / low, high_freq_wavelen = old_len / high;
    const at::Tensor wavelen = at::reciprocal(inv) * (2.0 * kPi);
    at::Tensor inv_llama = at::where(wavelen > low_freq_wavelen, inv / factor, inv);
    const at::Tensor smooth = (at::reciprocal(wavelen) * old_len - low) / (high - low);
    const at::Tensor smoothed = (1.0 - smooth) * inv_llama / factor + smooth * inv_llama;
    const at::Tensor medium = (wavelen < high_freq_wavelen).logical_not() *
                              (wavelen > low_freq_wavelen).logical_not();
    inv_llama = at::where(medium, smoothed, inv_llama);
    inv = inv_llama;
  }
  inv_freq_ = inv.contiguous();
}

std::pair<at::Tensor, at::Tensor> RotaryEmbedding::cos_sin(
    std::int64_t seq_len, const c10::TensorOptions& options) const {
  const auto dtype = options.dtype_opt().value_or(caffe2::TypeMeta::Make<float>());
  const c10::Device device = options.device();
  if (!cos_cache_.defined() || cos_cache_.size(0) < seq_len || cos_cache_.device() != device ||
      cos_cache_.dtype() != dtype) {
    const std::int64_t len =
        std::max(seq_len, cos_cache_.defined() && cos_cache_.device() == device &&
                                  cos_cache_.dtype() == dtype
                              ? cos_cache_.size(0)
                              : std::int64_t{0});
    const auto f32 = at::TensorOptions().dtype(at::kFloat).device(device);
    const at::Tensor positions = at::arange(len, f32.dtype(at::kLong)).to(at::kFloat);
    const at::Tensor freqs = at::outer(positions, inv_freq_.to(device));  // [T, d/2]
    const at::Tensor emb = at::cat({freqs, freqs}, -1);                   // [T, d]
    cos_cache_ = emb.cos().to(dtype);
    sin_cache_ = emb.sin().to(dtype);
  }
  return {cos_cache_.narrow(0, 0, seq_len), sin_cache_.narrow(0, 0, seq_len)};
}

at::Tensor rotate_half(const at::Tensor& x) {
  const std::int64_t half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return x * cos + rotate_half(x) * sin;
}

// ---- attention, MLP, decoder layer ----

LlamaAttentionImpl::LlamaAttentionImpl(const ModelConfig& config, std::int64_t layer_index,
                                       const c10::TensorOptions& options)
    : head_dim_(config.head_dim()),
      sliding_window_(config.uses_sliding_window(layer_index) ? config.sliding_window : 0) {
  const std::int64_t h = config.hidden_size, heads = config.num_attention_heads,
                     kv_heads = config.num_key_value_heads;
  q_proj = register_module("q_proj", Linear(h, heads * head_dim_, config.attention_bias,
                                            options));
  k_proj = register_module("k_proj", Linear(h, kv_heads * head_dim_, config.attention_bias,
                                            options));
  v_proj = register_module("v_proj", Linear(h, kv_heads * head_dim_, config.attention_bias,
                                            options));
  o_proj = register_module("o_proj", Linear(heads * head_dim_, h, config.attention_out_bias,
                                            options));
}

at::Tensor LlamaAttentionImpl::forward(const at::Tensor& x, const at::Tensor& cos,
                                       const at::Tensor& sin, const at::Tensor& segment_mask) {
  const std::int64_t b = x.size(0), t = x.size(1);
  // Head counts from the weights: a tensor-parallel rank holds some of the heads.
  const std::int64_t heads = q_proj->weight.size(0) / head_dim_, kv_heads = k_proj->weight.size(0) / head_dim_;
  at::Tensor q = q_proj(x).view({b, t, heads, head_dim_}).transpose(1, 2);
  at::Tensor k = k_proj(x).view({b, t, kv_heads, head_dim_}).transpose(1, 2);
  at::Tensor v = v_proj(x).view({b, t, kv_heads, head_dim_}).transpose(1, 2);
  q = apply_rotary(q, cos, sin);
  k = apply_rotary(k, cos, sin);

  std::optional<at::Tensor> mask;
  bool causal = true;
  if (segment_mask.defined()) {
    mask = segment_mask;
    causal = false;
  }
  if (sliding_window_ > 0 && t > sliding_window_) {
    // Key j is visible to query i iff i - W < j <= i (HF sliding_window_overlay).
    const auto idx = at::arange(t, at::TensorOptions().dtype(at::kLong).device(x.device()));
    const at::Tensor i = idx.unsqueeze(1), j = idx.unsqueeze(0);
    const at::Tensor window = at::logical_and(j <= i, (i - j) < sliding_window_);
    mask = mask ? at::logical_and(*mask, window) : window;
    causal = false;
  }
  // GQA: kv head g serves query heads g*r .. g*r+r-1 (HF repeat_kv, i.e. repeat_interleave),
  // which is what enable_gqa does.
  at::Tensor o = at::scaled_dot_product_attention(q, k, v, mask, /*dropout_p=*/0.0, causal,
                                                  /*scale=*/std::nullopt,
                                                  /*enable_gqa=*/kv_heads != heads);
  o = o.transpose(1, 2).reshape({b, t, heads * head_dim_});
  return o_proj(o);
}

LlamaMLPImpl::LlamaMLPImpl(const ModelConfig& config, const c10::TensorOptions& options) {
  const std::int64_t h = config.hidden_size, f = config.intermediate_size;
  gate_proj = register_module("gate_proj", Linear(h, f, config.mlp_bias, options));
  up_proj = register_module("up_proj", Linear(h, f, config.mlp_bias, options));
  down_proj = register_module("down_proj", Linear(f, h, config.mlp_bias, options));
}

at::Tensor LlamaMLPImpl::forward(const at::Tensor& x) {
  return down_proj(at::silu(gate_proj(x)) * up_proj(x));
}

LlamaDecoderLayerImpl::LlamaDecoderLayerImpl(const ModelConfig& config, std::int64_t layer_index,
                                             const c10::TensorOptions& options) {
  input_layernorm = register_module(
      "input_layernorm", RMSNorm(config.hidden_size, config.rms_norm_eps, options));
  self_attn = register_module("self_attn", LlamaAttention(config, layer_index, options));
  post_attention_layernorm = register_module(
      "post_attention_layernorm", RMSNorm(config.hidden_size, config.rms_norm_eps, options));
  mlp = register_module("mlp", LlamaMLP(config, options));
}

at::Tensor LlamaDecoderLayerImpl::forward(const at::Tensor& x, const at::Tensor& cos,
                                          const at::Tensor& sin, const at::Tensor& segment_mask) {
  const at::Tensor h = x + self_attn(input_layernorm(x), cos, sin, segment_mask);
  return h + mlp(post_attention_layernorm(h));
}

// ---- model ----

LlamaModelImpl::LlamaModelImpl(const ModelConfig& config, const c10::TensorOptions& options)
    : rotary_(config) {
  embed_tokens =
      register_module("embed_tokens", Embedding(config.vocab_size, config.hidden_size, options));
  layers = register_module("layers", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < config.num_hidden_layers; ++i) {
    LlamaDecoderLayer layer(config, i, options);
    layers->push_back(layer);
    layer_list.push_back(layer);
  }
  norm = register_module("norm", RMSNorm(config.hidden_size, config.rms_norm_eps, options));
}

AttentionInputs LlamaModelImpl::attention_inputs(const at::Tensor& input_ids, const at::Tensor& segment_ids,
                                                 const c10::TensorOptions& options) const {
  AttentionInputs in;
  std::tie(in.cos, in.sin) = rotary_.cos_sin(input_ids.size(1), options);
  if (segment_ids.defined()) {
    TORCH_CHECK(segment_ids.sizes() == input_ids.sizes(), "LlamaModel: segment_ids ",
                segment_ids.sizes(), " do not match input_ids ", input_ids.sizes());
    const at::Tensor positions = segment_positions(segment_ids);
    const std::vector<std::int64_t> shape{positions.size(0), 1, positions.size(1), -1};
    in.cos = in.cos.index_select(0, positions.reshape({-1})).view(shape);
    in.sin = in.sin.index_select(0, positions.reshape({-1})).view(shape);
    in.mask = segment_causal_mask(segment_ids);
  }
  return in;
}

at::Tensor LlamaModelImpl::forward(const at::Tensor& input_ids, const at::Tensor& segment_ids) {
  TORCH_CHECK(input_ids.dim() == 2, "LlamaModel: input_ids must be [batch, seq], got ",
              input_ids.sizes());
  at::Tensor h = embed_tokens(input_ids);
  const auto [cos, sin, mask] = attention_inputs(input_ids, segment_ids, h.options());
  const bool recompute = gradient_checkpointing && at::GradMode::is_enabled();
  for (std::size_t i = 0; i < layer_list.size(); ++i) {
    auto& layer = layer_list[i];
    if (layer_hooks) layer_hooks->before_layer(static_cast<std::int64_t>(i));
    if (recompute) {
      auto block = layer.ptr();  // the lambda owns references to the layer and cos/sin
      at::Tensor c = cos, s = sin, m = mask;
      h = checkpoint([block, c, s, m](const at::Tensor& x) { return block->forward(x, c, s, m); }, h);
    } else {
      h = layer->forward(h, cos, sin, mask);
    }
    if (layer_hooks) layer_hooks->after_layer(static_cast<std::int64_t>(i), h);
  }
  return norm(h);
}

LlamaForCausalLMImpl::LlamaForCausalLMImpl(const ModelConfig& config,
                                           const c10::TensorOptions& options)
    : config_(config) {
  config_.validate("model config");
  model = register_module("model", LlamaModel(config_, options));
  if (!config_.tie_word_embeddings) {
    lm_head = register_module("lm_head",
                              Linear(config_.hidden_size, config_.vocab_size, false, options));
  }
}

at::Tensor LlamaForCausalLMImpl::logits(const at::Tensor& hidden) {
  if (lm_head) return lm_head->forward(hidden);
  return at::linear(hidden, model->embed_tokens->weight);
}

at::Tensor LlamaForCausalLMImpl::forward(const at::Tensor& input_ids, const at::Tensor& segment_ids) {
  return logits(model->forward(input_ids, segment_ids));
}

}  // namespace lft::model
