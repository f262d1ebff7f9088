// The Llama, Qwen2 and Mistral family specs (config.json fields, defaults, templates).
#include "lft/model/llama_family.h"

#include <memory>

#include "lft/model/llama.h"

namespace lft::model {

namespace {

void read_llama(const HfConfigReader& r, ModelConfig& c) {
  read_silu_activation(r, c);
  c.attention_bias = r.boolean("attention_bias", false);
  c.attention_out_bias = c.attention_bias;
  c.mlp_bias = r.boolean("mlp_bias", false);
}

void write_llama(const ModelConfig& c, nlohmann::ordered_json& j) {
  j["hidden_act"] = "silu";
  j["attention_bias"] = c.attention_bias;
  j["mlp_bias"] = c.mlp_bias;
}

void read_qwen2(const HfConfigReader& r, ModelConfig& c) {
  read_silu_activation(r, c);
  c.attention_bias = true;
  read_qwen_sliding_window(r, c);
}

void write_qwen2(const ModelConfig& c, nlohmann::ordered_json& j) {
  j["hidden_act"] = "silu";
  write_qwen_sliding_window(c, j);
}

void read_mistral(const HfConfigReader& r, ModelConfig& c) {
  read_silu_activation(r, c);
  c.sliding_window = r.integer("sliding_window", 0);
  c.sliding_window_first_layer = 0;
}

void write_mistral(const ModelConfig& c, nlohmann::ordered_json& j) {
  j["hidden_act"] = "silu";
  j["sliding_window"] = c.sliding_window > 0 ? nlohmann::ordered_json(c.sliding_window) : nullptr;
}

}  // namespace

LayerParameters llama_layer_parameters(const ModelConfig& c, std::int64_t) {
  const std::int64_t h = c.hidden_size, q = c.num_attention_heads * c.head_dim(), kv = c.num_key_value_heads * c.head_dim(),
                     ffn = c.intermediate_size;
  LayerParameters p;
  p.token_matmul = h * q + 2 * h * kv + q * h  // q, k, v, o
                   + 3 * h * ffn;              // gate, up, down
  p.all = p.token_matmul + c.norms_per_layer * h;
  if (c.attention_bias) p.all += q + 2 * kv;
  if (c.attention_out_bias) p.all += h;
  if (c.mlp_bias) p.all += 2 * ffn + h;
  if (c.qk_norm) p.all += 2 * c.head_dim();
  return p;
}

void read_silu_activation(const HfConfigReader& r, ModelConfig& c) {
  const std::string act = r.string("hidden_act", "silu");
  if (act != "silu") config_field_error(r.file, "hidden_act", "'" + act + "' is not supported (silu)");
  c.hidden_activation = act;
}

void read_qwen_sliding_window(const HfConfigReader& r, ModelConfig& c) {
  if (!r.boolean("use_sliding_window", false)) return;
  c.sliding_window = r.integer("sliding_window", 4096);
  c.sliding_window_first_layer = r.integer("max_window_layers", 28);
}

void write_qwen_sliding_window(const ModelConfig& c, nlohmann::ordered_json& j) {
  j["use_sliding_window"] = c.sliding_window > 0;
  j["sliding_window"] = c.sliding_window > 0 ? nlohmann::ordered_json(c.sliding_window) : nullptr;
  j["max_window_layers"] = c.sliding_window > 0 ? c.sliding_window_first_layer : c.num_hidden_layers;
}

FamilySpec llama_family() {
  // No chat template: model_type llama is Llama 2's (llama2 template) and Llama 3's (llama3) alike.
  return {"llama", "LlamaForCausalLM", 2048, read_llama, write_llama, create_model<LlamaForCausalLMImpl>, ""};
}

FamilySpec qwen2_family() {
  return {"qwen2", "Qwen2ForCausalLM", 32768, read_qwen2, write_qwen2, create_model<LlamaForCausalLMImpl>, "qwen"};
}

FamilySpec mistral_family() {
  return {"mistral", "MistralForCausalLM", 131072, read_mistral, write_mistral, create_model<LlamaForCausalLMImpl>, "mistral"};
}

}  // namespace lft::model
