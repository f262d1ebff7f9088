// The Qwen3-MoE, Qwen2-MoE and Mixtral specs: their config.json fields and defaults (transformers
// 5's Qwen3MoeConfig, Qwen2MoeConfig, MixtralConfig).
#include "lft/model/moe_families.h"

#include <string>

#include "lft/model/llama_family.h"
#include "lft/model/moe.h"

namespace lft::model {

namespace {

// transformers reads `use_sliding_window` for these families through layer_types, which the
// released checkpoints leave off; lftrain has no per-layer window for them.
void refuse_sliding_window(const HfConfigReader& r) {
  if (r.boolean("use_sliding_window", false))
    config_field_error(r.file, "use_sliding_window", "true is not supported for a mixture of experts (set it to false)");
}

std::vector<std::int64_t> integer_list(const HfConfigReader& r, const std::string& key) {
  std::vector<std::int64_t> out;
  const nlohmann::json* list = r.find(key);
  if (list == nullptr) return out;
  if (!list->is_array()) config_field_error(r.file, key, "expected a list of layer indices, got " + json_type_name(*list));
  for (const auto& item : *list) {
    if (!item.is_number_integer()) config_field_error(r.file, key, "expected layer indices, got " + json_type_name(item));
    out.push_back(item.get<std::int64_t>());
  }
  return out;
}

// The fields every MoE family shares, then the checks of the shape.
void read_router(const HfConfigReader& r, ModelConfig& c, const std::string& experts_key, std::int64_t experts,
                 std::int64_t top_k) {
  // transformers 5 writes Qwen3-MoE's num_experts as num_local_experts (its attribute map), the
  // Hub's Qwen configs num_experts and Mixtral's num_local_experts: either key is read.
  const char* other = experts_key == "num_experts" ? "num_local_experts" : "num_experts";
  c.moe.num_experts = r.find(experts_key) != nullptr ? r.integer(experts_key) : r.integer(other, experts);
  c.moe.experts_per_token = r.integer("num_experts_per_tok", top_k);
  c.moe.router_aux_loss_coef = r.real("router_aux_loss_coef", 0.001);
  c.moe.output_router_logits = r.boolean("output_router_logits", false);
  if (c.moe.num_experts < 1) config_field_error(r.file, experts_key, "must be at least 1");
  if (c.moe.experts_per_token < 1 || c.moe.experts_per_token > c.moe.num_experts)
    config_field_error(r.file, "num_experts_per_tok",
                       std::to_string(c.moe.experts_per_token) + " must be between 1 and " + experts_key + " (" +
                           std::to_string(c.moe.num_experts) + ")");
}

void read_qwen_moe_layers(const HfConfigReader& r, ModelConfig& c, std::int64_t width) {
  c.moe.expert_intermediate_size = r.integer("moe_intermediate_size", width);
  c.moe.normalize_top_k = r.boolean("norm_topk_prob", false);
  c.moe.sparse_step = r.integer("decoder_sparse_step", 1);
  c.moe.dense_layers = integer_list(r, "mlp_only_layers");
  if (c.moe.expert_intermediate_size < 1) config_field_error(r.file, "moe_intermediate_size", "must be at least 1");
  if (c.moe.sparse_step < 1) config_field_error(r.file, "decoder_sparse_step", "must be at least 1");
}

void write_router(const ModelConfig& c, nlohmann::ordered_json& j, const std::string& experts_key) {
  j[experts_key] = c.moe.num_experts;
  j["num_experts_per_tok"] = c.moe.experts_per_token;
  j["router_aux_loss_coef"] = c.moe.router_aux_loss_coef;
  j["output_router_logits"] = c.moe.output_router_logits;
}

void write_qwen_moe_layers(const ModelConfig& c, nlohmann::ordered_json& j) {
  j["moe_intermediate_size"] = c.moe.expert_intermediate_size;
  j["norm_topk_prob"] = c.moe.normalize_top_k;
  j["decoder_sparse_step"] = c.moe.sparse_step;
  j["mlp_only_layers"] = c.moe.dense_layers;
  j["use_sliding_window"] = false;
}

void read_qwen3_moe(const HfConfigReader& r, ModelConfig& c) {
  read_silu_activation(r, c);
  refuse_sliding_window(r);
  c.attention_bias = r.boolean("attention_bias", false);
  c.attention_out_bias = c.attention_bias;
  c.qk_norm = true;
  read_router(r, c, "num_experts", 128, 8);
  read_qwen_moe_layers(r, c, 768);
}

void write_qwen3_moe(const ModelConfig& c, nlohmann::ordered_json& j) {
  j["hidden_act"] = "silu";
  j["attention_bias"] = c.attention_bias;
  write_router(c, j, "num_experts");
  write_qwen_moe_layers(c, j);
}

void read_qwen2_moe(const HfConfigReader& r, ModelConfig& c) {
  read_silu_activation(r, c);
  refuse_sliding_window(r);
  c.attention_bias = r.boolean("qkv_bias", true);
  read_router(r, c, "num_experts", 60, 4);
  read_qwen_moe_layers(r, c, 1408);
  c.moe.shared_expert_intermediate_size = r.integer("shared_expert_intermediate_size", 5632);
  if (c.moe.shared_expert_intermediate_size < 1)
    config_field_error(r.file, "shared_expert_intermediate_size", "must be at least 1");
}

void write_qwen2_moe(const ModelConfig& c, nlohmann::ordered_json& j) {
  j["hidden_act"] = "silu";
  j["qkv_bias"] = c.attention_bias;
  write_router(c, j, "num_experts");
  write_qwen_moe_layers(c, j);
  j["shared_expert_intermediate_size"] = c.moe.shared_expert_intermediate_size;
}

void read_mixtral(const HfConfigReader& r, ModelConfig& c) {
  read_silu_activation(r, c);
  c.sliding_window = r.integer("sliding_window", 0);
  c.sliding_window_first_layer = 0;
  read_router(r, c, "num_local_experts", 8, 2);
  c.moe.expert_intermediate_size = c.intermediate_size;  // Mixtral's experts are intermediate_size wide
  c.moe.normalize_top_k = true;
  c.moe.weights_in_router_dtype = false;
  c.moe.mixtral_names = true;
  if (r.real("router_jitter_noise", 0.0) != 0.0)
    config_field_error(r.file, "router_jitter_noise", "router jitter is not supported (set it to 0)");
}

void write_mixtral(const ModelConfig& c, nlohmann::ordered_json& j) {
  j["hidden_act"] = "silu";
  j["sliding_window"] = c.sliding_window > 0 ? nlohmann::ordered_json(c.sliding_window) : nullptr;
  write_router(c, j, "num_local_experts");
  j["router_jitter_noise"] = 0.0;
}

}  // namespace

FamilySpec qwen3_moe_family() {
  FamilySpec f{"qwen3_moe", "Qwen3MoeForCausalLM", 32768, read_qwen3_moe, write_qwen3_moe,
               create_model<MoeForCausalLMImpl>, "qwen3"};
  f.layer_parameters = moe_layer_parameters;
  return f;
}

FamilySpec qwen2_moe_family() {
  FamilySpec f{"qwen2_moe", "Qwen2MoeForCausalLM", 32768, read_qwen2_moe, write_qwen2_moe,
               create_model<MoeForCausalLMImpl>, "qwen"};
  f.layer_parameters = moe_layer_parameters;
  return f;
}

FamilySpec mixtral_family() {
  FamilySpec f{"mixtral", "MixtralForCausalLM", 131072, read_mixtral, write_mixtral,
               create_model<MoeForCausalLMImpl>, "mistral"};
  f.layer_parameters = moe_layer_parameters;
  return f;
}

}  // namespace lft::model
