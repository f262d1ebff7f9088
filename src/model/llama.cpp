// The Llama family: attention, MLP, the pre-norm decoder block and LlamaForCausalLM.
#include "lft/model/llama.h"

#include <cmath>
#include <optional>
#include <string>

#include <ATen/ATen.h>

#include "lft/model/blocked_attention.h"
#include "lft/model/eager_attention.h"
#include "lft/model/fused.h"

namespace lft::model {

namespace {

TpSplit split(TpRole role, std::int64_t groups, std::int64_t group_size, bool even, bool replicable,
              const std::string& what) {
  TpSplit s;
  s.role = role;
  s.groups = groups;
  s.group_size = group_size;
  s.even = even;
  s.replicable = replicable;
  s.what = what;
  return s;
}

// `name` without its first component "<prefix>." when it starts with it, else "".
std::string inside(const std::string& name, const std::string& prefix) {
  return name.rfind(prefix + ".", 0) == 0 ? name.substr(prefix.size() + 1) : "";
}

}  // namespace

// ---- attention ----

LlamaAttentionImpl::LlamaAttentionImpl(const ModelConfig& config, std::int64_t layer_index,
                                       const c10::TensorOptions& options)
    : config_(config),
      head_dim_(config.head_dim()),
      sliding_window_(config.uses_sliding_window(layer_index) ? config.sliding_window : 0) {
  // Python's query_pre_attn_scalar**-0.5 (C's pow), for transformers' bits.
  if (config.query_pre_attn_scalar > 0) scale_ = std::pow(config.query_pre_attn_scalar, -0.5);
  const std::int64_t h = config.hidden_size, heads = config.num_attention_heads,
                     kv_heads = config.num_key_value_heads;
  q_proj = register_module("q_proj", Linear(h, heads * head_dim_, config.attention_bias, options));
  k_proj = register_module("k_proj", Linear(h, kv_heads * head_dim_, config.attention_bias, options));
  v_proj = register_module("v_proj", Linear(h, kv_heads * head_dim_, config.attention_bias, options));
  o_proj = register_module("o_proj", Linear(heads * head_dim_, h, config.attention_out_bias, options));
}

void LlamaAttentionImpl::normalize_qk(at::Tensor&, at::Tensor&) {}

TpSplit LlamaAttentionImpl::tp_split(const std::string& name) const {
  const std::int64_t heads = config_.num_attention_heads, kv = config_.num_key_value_heads;
  if (name.rfind("q_proj.", 0) == 0)
    return split(TpRole::ColumnParallel, heads, head_dim_, true, false, "attention heads");
  if (name.rfind("k_proj.", 0) == 0 || name.rfind("v_proj.", 0) == 0)
    return split(TpRole::ColumnParallel, kv, head_dim_, true, true, "key/value heads");
  if (name.rfind("o_proj.", 0) == 0)
    return split(TpRole::RowParallel, heads, head_dim_, true, false, "attention heads");
  return {};
}

double LlamaAttentionImpl::q_width(int tp) const {
  return static_cast<double>(config_.num_attention_heads / tp * head_dim_);
}

double LlamaAttentionImpl::kv_width(int tp) const {
  const std::int64_t kv = config_.num_key_value_heads;
  return static_cast<double>((kv % tp == 0 ? kv / tp : 1) * head_dim_);
}

double LlamaAttentionImpl::saved_elements_per_token(int tp) const { return 3 * q_width(tp) + 2 * kv_width(tp); }

at::Tensor LlamaAttentionImpl::forward(const at::Tensor& x, const at::Tensor& cos,
                                       const at::Tensor& sin, const at::Tensor& segment_mask,
                                       const ContextSplit& split) {
  const std::int64_t b = x.size(0), t = x.size(1);
  // Head counts from the outputs: a tensor-parallel rank holds some of the heads.
  at::Tensor q = q_proj(x), k = k_proj(x);
  const std::int64_t heads = q.size(-1) / head_dim_, kv_heads = k.size(-1) / head_dim_;
  q = q.view({b, t, heads, head_dim_});
  k = k.view({b, t, kv_heads, head_dim_});
  at::Tensor v = v_proj(x).view({b, t, kv_heads, head_dim_}).transpose(1, 2);
  normalize_qk(q, k);
  q = rotary_bthd(q, cos, sin);
  k = rotary_bthd(k, cos, sin);
  // Context parallelism where the key/value heads cannot be shared out as they are: each query
  // head gets its own copy of its key/value head.
  auto repeat_kv = [&] {
    k = k.repeat_interleave(heads / kv_heads, 1);
    v = v.repeat_interleave(heads / kv_heads, 1);
  };
  if (split.group != nullptr && split.group->ring()) {
    TORCH_CHECK(!scale_ && config_.attn_logit_softcapping == 0,
                "ring attention has no query_pre_attn_scalar or attention soft-capping (use cp_mode ulysses)");
    if (kv_heads != heads) repeat_kv();
    const at::Tensor o = ring_attention(split, q, k, v, sliding_window_);
    return o_proj(o.transpose(1, 2).reshape({b, t, heads * head_dim_}));
  }
  SequenceExchange* cp = split.group;
  std::int64_t heads_here = heads, kv_here = kv_heads, t_attended = t;
  if (cp != nullptr) {  // [B, heads, chunk, d] -> [B, heads / cp, whole, d]
    auto exchange = [cp](const at::Tensor& y) { return sequence_to_heads(*cp, y.transpose(1, 2)).transpose(1, 2); };
    if (kv_heads % cp->size() != 0) repeat_kv();  // fewer kv heads than cp shares
    q = exchange(q);
    k = exchange(k);
    v = exchange(v);
    heads_here = q.size(1);
    kv_here = k.size(1);
    t_attended = q.size(2);
  }

  std::optional<at::Tensor> mask;
  bool causal = true;
  if (segment_mask.defined()) {
    mask = segment_mask;
    causal = false;
  }
  if (sliding_window_ > 0 && t_attended > sliding_window_) {
    // Key j is visible to query i iff i - W < j <= i (HF sliding_window_overlay).
    const auto idx = at::arange(t_attended, at::TensorOptions().dtype(at::kLong).device(x.device()));
    const at::Tensor i = idx.unsqueeze(1), j = idx.unsqueeze(0);
    const at::Tensor window = at::logical_and(j <= i, (i - j) < sliding_window_);
    mask = mask ? at::logical_and(*mask, window) : window;
    causal = false;
  }
  // GQA: kv head g serves query heads g*r .. g*r+r-1 (HF repeat_kv, i.e. repeat_interleave),
  // which is what enable_gqa does. On CUDA a mask (packed segments, a sliding window) leaves only
  // the memory-efficient kernel, which does not take grouped kv heads: with enable_gqa the math
  // kernel would run, holding every [T, T] score of every head in fp32. The kv heads repeated
  // first keep the memory-efficient kernel.
  if (mask && q.is_cuda() && kv_here != heads_here) {
    k = k.repeat_interleave(heads_here / kv_here, 1);
    v = v.repeat_interleave(heads_here / kv_here, 1);
    kv_here = heads_here;
  }
  const double softcap = config_.attn_logit_softcapping;
  const double scale = scale_.value_or(std::pow(static_cast<double>(head_dim_), -0.5));
  at::Tensor o = softcap > 0 ? softcapped_attention(q, k, v, mask, causal, scale, softcap)
                 : causal && !mask && blocked_attention_applies(q)
                     ? blocked_causal_attention(q, k, v, scale)
                     : at::scaled_dot_product_attention(q, k, v, mask, /*dropout_p=*/0.0, causal, scale_,
                                                        /*enable_gqa=*/kv_here != heads_here);
  o = o.transpose(1, 2);  // [B, T, heads, d]
  if (cp != nullptr) o = heads_to_sequence(*cp, o);
  return o_proj(o.reshape({b, t, heads * head_dim_}));
}

// ---- MLP ----

LlamaMLPImpl::LlamaMLPImpl(const ModelConfig& config, const c10::TensorOptions& options, std::int64_t intermediate_size)
    : intermediate_size_(intermediate_size > 0 ? intermediate_size : config.intermediate_size),
      gelu_tanh_(config.hidden_activation == "gelu_pytorch_tanh") {
  const std::int64_t h = config.hidden_size, f = intermediate_size_;
  gate_proj = register_module("gate_proj", Linear(h, f, config.mlp_bias, options));
  up_proj = register_module("up_proj", Linear(h, f, config.mlp_bias, options));
  down_proj = register_module("down_proj", Linear(f, h, config.mlp_bias, options));
}

at::Tensor LlamaMLPImpl::forward(const at::Tensor& x) {
  const at::Tensor gate = gate_proj(x), up = up_proj(x);
  if (gelu_tanh_) return down_proj(at::gelu(gate, "tanh") * up);
  const at::Tensor fused = fused_swiglu(gate, up);
  return down_proj(fused.defined() ? fused : at::silu(gate) * up);
}

double LlamaMLPImpl::saved_elements_per_token(int tp) const {
  return 4.0 * static_cast<double>((intermediate_size_ + tp - 1) / tp);
}

TpSplit LlamaMLPImpl::tp_split(const std::string& name) const {
  if (name.rfind("gate_proj.", 0) == 0 || name.rfind("up_proj.", 0) == 0)
    return split(TpRole::ColumnParallel, intermediate_size_, 1, false, false, "MLP rows");
  if (name.rfind("down_proj.", 0) == 0)
    return split(TpRole::RowParallel, intermediate_size_, 1, false, false, "MLP rows");
  return {};
}

// ---- decoder layer ----

LlamaDecoderLayerImpl::LlamaDecoderLayerImpl(const ModelConfig& config, std::int64_t layer_index,
                                             const c10::TensorOptions& options,
                                             std::shared_ptr<LlamaAttentionImpl> attention) {
  if (!attention) attention = std::make_shared<LlamaAttentionImpl>(config, layer_index, options);
  input_layernorm = register_module("input_layernorm", RMSNorm(config.hidden_size, config, options));
  self_attn = register_module("self_attn", LlamaAttention(std::move(attention)));
  post_attention_layernorm =
      register_module("post_attention_layernorm", RMSNorm(config.hidden_size, config, options));
  mlp = register_module("mlp", LlamaMLP(config, options));
}

at::Tensor LlamaDecoderLayerImpl::forward(const at::Tensor& x, const AttentionInputs& in, ParallelOps& ops) {
  const at::Tensor h = x + ops.exit(self_attn(ops.enter(input_layernorm(x)), in.cos, in.sin, in.mask, in.cp));
  return h + ops.exit(mlp(ops.enter(post_attention_layernorm(h))));
}

at::Tensor LlamaDecoderLayerImpl::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                                          const at::Tensor& segment_mask) {
  ParallelOps one_rank;
  AttentionInputs in;
  in.cos = cos;
  in.sin = sin;
  in.mask = segment_mask;
  return forward(x, in, one_rank);
}

double LlamaDecoderLayerImpl::saved_elements_per_token(int tp, bool sequence_parallel) const {
  const double hidden = static_cast<double>(input_layernorm->weight.size(0));
  const double stream = sequence_parallel ? hidden / tp : hidden;
  return 6 * stream + (sequence_parallel ? 2 * hidden : 0.0) + self_attn->saved_elements_per_token(tp) +
         mlp->saved_elements_per_token(tp);
}

TpSplit LlamaDecoderLayerImpl::tp_split(const std::string& name) const {
  if (const std::string rest = inside(name, "self_attn"); !rest.empty()) return self_attn->tp_split(rest);
  if (const std::string rest = inside(name, "mlp"); !rest.empty()) return mlp->tp_split(rest);
  return {};  // the norms
}

// ---- model ----

LlamaForCausalLMImpl::LlamaForCausalLMImpl(const ModelConfig& config, const c10::TensorOptions& options)
    : CausalLM(config, options, [&config, &options](std::int64_t layer) -> std::shared_ptr<DecoderBlock> {
        return std::make_shared<LlamaDecoderLayerImpl>(config, layer, options);
      }) {}

}  // namespace lft::model
