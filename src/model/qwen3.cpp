// Qwen3: per-head q/k RMSNorm on Llama's block.
#include "lft/model/qwen3.h"

#include <memory>

#include "lft/model/llama_family.h"

namespace lft::model {

Qwen3AttentionImpl::Qwen3AttentionImpl(const ModelConfig& config, std::int64_t layer_index,
                                       const c10::TensorOptions& options)
    : LlamaAttentionImpl(config, layer_index, options) {
  q_norm = register_module("q_norm", RMSNorm(config.head_dim(), config, options));
  k_norm = register_module("k_norm", RMSNorm(config.head_dim(), config, options));
}

void Qwen3AttentionImpl::normalize_qk(at::Tensor& q, at::Tensor& k) {
  q = q_norm(q);
  k = k_norm(k);
}

double Qwen3AttentionImpl::saved_elements_per_token(int tp) const {
  return LlamaAttentionImpl::saved_elements_per_token(tp) + 2 * q_width(tp) + 2 * kv_width(tp);
}

TpSplit Qwen3AttentionImpl::tp_split(const std::string& name) const {
  if (name == "q_norm.weight" || name == "k_norm.weight") {
    TpSplit s;
    s.role = TpRole::ReplicatedInsideTp;
    return s;
  }
  return LlamaAttentionImpl::tp_split(name);
}

Qwen3ForCausalLMImpl::Qwen3ForCausalLMImpl(const ModelConfig& config, const c10::TensorOptions& options)
    : CausalLM(config, options, [&config, &options](std::int64_t layer) -> std::shared_ptr<DecoderBlock> {
        auto attention = std::make_shared<Qwen3AttentionImpl>(config, layer, options);
        return std::make_shared<LlamaDecoderLayerImpl>(config, layer, options, attention);
      }) {}

namespace {

void read_qwen3(const HfConfigReader& r, ModelConfig& c) {
  read_silu_activation(r, c);
  c.explicit_head_dim = r.integer("head_dim", 128);
  c.attention_bias = r.boolean("attention_bias", false);
  c.attention_out_bias = c.attention_bias;
  c.qk_norm = true;
  read_qwen_sliding_window(r, c);
}

void write_qwen3(const ModelConfig& c, nlohmann::ordered_json& j) {
  j["hidden_act"] = "silu";
  j["attention_bias"] = c.attention_bias;
  write_qwen_sliding_window(c, j);
}

}  // namespace

FamilySpec qwen3_family() {
  return {"qwen3", "Qwen3ForCausalLM", 40960, read_qwen3, write_qwen3, create_model<Qwen3ForCausalLMImpl>, "qwen3"};
}

}  // namespace lft::model
