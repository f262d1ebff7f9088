// The Gemma family spec: Llama's model with Gemma's config-driven hooks.
#include "lft/model/gemma.h"

#include <cmath>
#include <string>

#include "lft/model/llama.h"

namespace lft::model {

void read_gemma_common(const HfConfigReader& r, ModelConfig& c, const std::string& field) {
  std::string act = r.string(field, "gelu_pytorch_tanh");
  if (act == "gelu") act = "gelu_pytorch_tanh";  // transformers: the official releases' legacy value
  if (act != "gelu_pytorch_tanh")
    config_field_error(r.file, field, "'" + act + "' is not supported (gelu_pytorch_tanh)");
  c.hidden_activation = act;
  if (r.boolean("use_bidirectional_attention", false))
    config_field_error(r.file, "use_bidirectional_attention", "bidirectional attention is not supported (a causal LM)");
  c.explicit_head_dim = r.integer("head_dim", 256);
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", true);
  c.attention_bias = r.boolean("attention_bias", false);
  c.attention_out_bias = c.attention_bias;
  c.embedding_multiplier = std::sqrt(static_cast<double>(c.hidden_size));
  c.unit_offset_norms = true;
}

namespace {

void read_gemma(const HfConfigReader& r, ModelConfig& c) { read_gemma_common(r, c, "hidden_act"); }

void write_gemma(const ModelConfig& c, nlohmann::ordered_json& j) {
  j["hidden_act"] = c.hidden_activation;
  j["attention_bias"] = c.attention_bias;
}

}  // namespace

FamilySpec gemma_family() {
  // LlamaFactory's gemma template is not in this build (chat_template.cpp): no template here.
  return {"gemma", "GemmaForCausalLM", 8192, read_gemma, write_gemma, create_model<LlamaForCausalLMImpl>, ""};
}

}  // namespace lft::model
