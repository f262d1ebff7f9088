// ModelConfig: from the [model] table or a Hugging Face config.json (hf-formats notes, section 2).
#include "lft/model/model_config.h"

#include <cmath>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "lft/config/config.h"
#include "lft/model/families.h"
#include "lft/model/hf_config_reader.h"
#include "lft/model/prequantized.h"
#include "lft/runtime/json_nesting.h"

namespace lft::model {

namespace {

using Json = nlohmann::json;
using lft::config::ConfigError;

[[noreturn]] void fail(const std::string& file, const std::string& field, const std::string& what) {
  config_field_error(file, field, what);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path + ": cannot open the model's config.json");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ConfigError(path + ": read error");
  return text.str();
}

std::string format_count(std::int64_t n) {
  char buf[64];
  if (n >= 1000000000LL) {
    std::snprintf(buf, sizeof buf, "%.2f B", static_cast<double>(n) / 1e9);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f M", static_cast<double>(n) / 1e6);
  }
  return buf;
}

}  // namespace

ModelConfig ModelConfig::from_hf_json(const std::string& json_text, const std::string& file_name) {
  if (const std::string deep = json_too_deep(json_text); !deep.empty()) throw ConfigError(file_name + ": " + deep);
  Json root;
  try {
    root = Json::parse(json_text);
  } catch (const Json::parse_error& e) {
    throw ConfigError(file_name + ": not valid JSON: " + e.what());
  }
  if (!root.is_object()) {
    throw ConfigError(file_name + ": expected a JSON object (a Hugging Face config.json), got " +
                      json_type_name(root));
  }
  const HfConfigReader r{root, file_name};

  ModelConfig c;
  if (r.find("model_type") == nullptr) fail(file_name, "model_type", "missing (" + family_names() + ")");
  c.model_type = r.string("model_type", "");
  const FamilySpec* family = find_family(c.model_type);
  if (family == nullptr) {
    fail(file_name, "model_type",
         "'" + c.model_type + "' is not supported; lftrain trains " + family_names() + " models");
  }

  c.vocab_size = r.integer("vocab_size");
  c.hidden_size = r.integer("hidden_size");
  c.intermediate_size = r.integer("intermediate_size");
  c.num_hidden_layers = r.integer("num_hidden_layers");
  c.num_attention_heads = r.integer("num_attention_heads");
  c.num_key_value_heads = r.integer("num_key_value_heads", c.num_attention_heads);
  c.max_position_embeddings = r.integer("max_position_embeddings", family->default_max_positions);
  c.rms_norm_eps = r.real("rms_norm_eps", 1e-6);
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", false);
  c.explicit_head_dim = r.integer("head_dim", 0);
  c.dtype = r.string("dtype", r.string("torch_dtype", ""));
  c.summary_dropout_prob = r.real("summary_dropout_prob", 0.1);

  // RoPE: transformers 5 writes one `rope_parameters` object; 4.x wrote `rope_theta` plus
  // `rope_scaling` (null or an object whose kind is in `rope_type` or the older `type`).
  c.rope_theta = r.real("rope_theta", 10000.0);
  const Json* rope = r.find(root, "rope_parameters");
  std::string rope_field = "rope_parameters";
  if (rope == nullptr) {
    rope = r.find(root, "rope_scaling");
    rope_field = "rope_scaling";
  }
  if (rope != nullptr) {
    if (!rope->is_object()) fail(file_name, rope_field, "expected an object, got " + json_type_name(*rope));
    c.rope_theta = r.real(*rope, "rope_theta", rope_field + ".rope_theta", c.rope_theta);
    std::string kind = r.string(*rope, "type", rope_field + ".type", "default");
    kind = r.string(*rope, "rope_type", rope_field + ".rope_type", kind);
    if (kind != "default" && kind != "linear" && kind != "llama3") {
      fail(file_name, rope_field + ".rope_type",
           "'" + kind + "' is not supported (default, linear, llama3)");
    }
    c.rope_type = kind;
    if (kind == "linear" || kind == "llama3") {
      const Json* factor = r.find(*rope, "factor");
      if (factor == nullptr) fail(file_name, rope_field + ".factor", "missing for " + kind);
      c.rope_factor = r.real(*rope, "factor", rope_field + ".factor", 1.0);
    }
    if (kind == "llama3") {
      c.rope_low_freq_factor =
          r.real(*rope, "low_freq_factor", rope_field + ".low_freq_factor", 1.0);
      c.rope_high_freq_factor =
          r.real(*rope, "high_freq_factor", rope_field + ".high_freq_factor", 4.0);
      const std::int64_t fallback = c.max_position_embeddings;
      c.rope_original_max_position_embeddings =
          r.integer(*rope, "original_max_position_embeddings",
                    rope_field + ".original_max_position_embeddings", &fallback);
    }
  }

  family->read(r, c);
  // A window at least as long as every sequence the model may see changes nothing.
  if (c.sliding_window >= c.max_position_embeddings) c.sliding_window = 0;
  if (c.sliding_window == 0) c.sliding_window_first_layer = 0;

  c.validate(file_name);
  return c;
}

ModelConfig ModelConfig::from_hf_folder(const std::string& folder) {
  std::string path = folder;
  if (path.empty()) path = ".";
  if (path.back() != '/') path += '/';
  path += "config.json";
  (void)read_prequantization(folder);  // a quantization_config lftrain cannot read is refused here
  return from_hf_json(read_file(path), path);
}

namespace {

// The run config's keys for a mixture of experts (LlamaFactory's moe_aux_loss_coef, Megatron's
// capacity keys), refused naming the key on a model without experts.
void apply_moe_keys(const lft::config::Config& cfg, ModelConfig& c) {
  auto require_experts = [&](const char* key, const std::string& why) {
    if (!c.moe.any())
      throw ConfigError(cfg.where(key) + ": the model (" + c.model_type + ") has no experts, so " + why +
                        "; remove the key");
  };
  // LlamaFactory's moe_aux_loss_coef (configure_moe): the coefficient, and the loss turned on.
  if (cfg.is_set("moe_aux_loss_coef") && cfg.real("moe_aux_loss_coef") != 0) {
    require_experts("moe_aux_loss_coef", "there is no load-balancing loss");
    c.moe.router_aux_loss_coef = cfg.real("moe_aux_loss_coef");
    c.moe.output_router_logits = true;
  }
  if (cfg.is_set("moe_expert_capacity_factor") && cfg.real("moe_expert_capacity_factor") != 0) {
    require_experts("moe_expert_capacity_factor", "no expert has a capacity");
    c.moe.capacity_factor = cfg.real("moe_expert_capacity_factor");
    c.moe.drop_by_position = cfg.string("moe_token_drop_policy") == "position";
  }
}

}  // namespace

ModelConfig ModelConfig::from_run_config(const lft::config::Config& cfg) {
  if (!cfg.has_table("model")) {
    if (!cfg.is_set("model_name_or_path")) {
      throw ConfigError(cfg.source_name() +
                        ": no model: set model_name_or_path or an inline [model] table");
    }
    ModelConfig c = from_hf_folder(cfg.string("model_name_or_path"));
    apply_moe_keys(cfg, c);
    return c;
  }
  ModelConfig c;
  c.model_type = "llama";
  c.vocab_size = cfg.integer("model.vocab_size");
  c.hidden_size = cfg.integer("model.hidden_size");
  c.intermediate_size = cfg.integer("model.intermediate_size");
  c.num_hidden_layers = cfg.integer("model.num_hidden_layers");
  c.num_attention_heads = cfg.integer("model.num_attention_heads");
  c.num_key_value_heads = cfg.is_set("model.num_key_value_heads")
                              ? cfg.integer("model.num_key_value_heads")
                              : c.num_attention_heads;
  c.max_position_embeddings = cfg.integer("model.max_position_embeddings");
  c.rope_theta = cfg.real("model.rope_theta");
  c.rms_norm_eps = cfg.real("model.rms_norm_eps");
  c.tie_word_embeddings = cfg.boolean("model.tie_word_embeddings");
  c.validate(cfg.source_name() + " [model]");
  apply_moe_keys(cfg, c);  // an inline model is dense: the keys are refused
  return c;
}

void ModelConfig::validate(const std::string& where) const {
  auto positive = [&](const char* field, std::int64_t v) {
    if (v < 1) fail(where, field, "must be at least 1, got " + std::to_string(v));
  };
  positive("vocab_size", vocab_size);
  positive("hidden_size", hidden_size);
  positive("intermediate_size", intermediate_size);
  positive("num_hidden_layers", num_hidden_layers);
  positive("num_attention_heads", num_attention_heads);
  positive("num_key_value_heads", num_key_value_heads);
  positive("max_position_embeddings", max_position_embeddings);
  if (explicit_head_dim < 0) fail(where, "head_dim", "must be positive");
  if (explicit_head_dim == 0 && hidden_size % num_attention_heads != 0) {
    fail(where, "num_attention_heads",
         std::to_string(num_attention_heads) + " does not divide hidden_size " +
             std::to_string(hidden_size));
  }
  if (num_attention_heads % num_key_value_heads != 0) {
    fail(where, "num_key_value_heads",
         std::to_string(num_key_value_heads) + " does not divide num_attention_heads " +
             std::to_string(num_attention_heads));
  }
  if (head_dim() % 2 != 0) {
    fail(where, "head_dim", "rotary embeddings need an even head dimension, got " +
                                std::to_string(head_dim()));
  }
  // Sizes whose products do not fit the 64-bit element counts the model is built with.
  const double h = static_cast<double>(hidden_size), layer_params =
      h * (2.0 * static_cast<double>(num_attention_heads + num_key_value_heads) * static_cast<double>(head_dim()) +
           3.0 * static_cast<double>(intermediate_size));
  const double params = static_cast<double>(num_hidden_layers) * layer_params + 2.0 * h * static_cast<double>(vocab_size);
  if (params > 1e14)
    fail(where, "hidden_size",
         "the model would have " + std::to_string(static_cast<long long>(params / 1e9)) +
             " billion parameters, more than any machine holds (the limit here is 100,000 billion); check the sizes");
  if (!(rope_theta > 0.0)) fail(where, "rope_theta", "must be positive");
  if (!(rms_norm_eps > 0.0)) fail(where, "rms_norm_eps", "must be positive");
  if (!(rope_factor > 0.0)) fail(where, "rope factor", "must be positive");
  if (rope_type == "llama3" && !(rope_high_freq_factor > rope_low_freq_factor)) {
    fail(where, "high_freq_factor", "must be larger than low_freq_factor");
  }
  if (sliding_window < 0) fail(where, "sliding_window", "must not be negative");
  if (!sliding_layers.empty() && static_cast<std::int64_t>(sliding_layers.size()) != num_hidden_layers)
    fail(where, "layer_types",
         "has " + std::to_string(sliding_layers.size()) + " entries for " + std::to_string(num_hidden_layers) +
             " layers");
  if (query_pre_attn_scalar < 0) fail(where, "query_pre_attn_scalar", "must be positive");
  if (attn_logit_softcapping < 0) fail(where, "attn_logit_softcapping", "must be positive or null");
  if (final_logit_softcapping < 0) fail(where, "final_logit_softcapping", "must be positive or null");
  if (!(summary_dropout_prob >= 0.0 && summary_dropout_prob < 1.0))
    fail(where, "summary_dropout_prob", "must be in [0, 1) (TRL's value-head dropout)");
}

std::string ModelConfig::to_hf_json() const {
  nlohmann::ordered_json j;
  const FamilySpec* family = find_family(model_type);
  if (family == nullptr) throw ConfigError("no model family for model_type '" + model_type + "'");
  j["architectures"] = {family->architecture};
  j["model_type"] = model_type;
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["num_key_value_heads"] = num_key_value_heads;
  j["head_dim"] = head_dim();
  j["max_position_embeddings"] = max_position_embeddings;
  j["rms_norm_eps"] = rms_norm_eps;
  j["tie_word_embeddings"] = tie_word_embeddings;
  nlohmann::ordered_json rope;
  rope["rope_theta"] = rope_theta;
  rope["rope_type"] = rope_type;
  if (rope_type != "default") rope["factor"] = rope_factor;
  if (rope_type == "llama3") {
    rope["low_freq_factor"] = rope_low_freq_factor;
    rope["high_freq_factor"] = rope_high_freq_factor;
    rope["original_max_position_embeddings"] = rope_original_max_position_embeddings > 0
                                                   ? rope_original_max_position_embeddings
                                                   : max_position_embeddings;
  }
  j["rope_parameters"] = rope;  // transformers 5
  j["rope_theta"] = rope_theta;  // transformers 4.x
  if (rope_type == "default") {
    j["rope_scaling"] = nullptr;
  } else {
    j["rope_scaling"] = rope;
  }
  family->write(*this, j);
  if (!dtype.empty()) j["dtype"] = dtype;
  return j.dump(2) + "\n";
}

std::int64_t ModelConfig::num_parameters() const {
  const std::int64_t embed = vocab_size * hidden_size;
  const std::int64_t score = score_head == ScoreHead::None ? 0 : hidden_size + 1;  // v_head.summary, score
  const bool head = !tie_word_embeddings && score_head != ScoreHead::TokenClassification;
  return num_non_embedding_parameters() + embed + (head ? embed : 0) + score;
}

namespace {

// The family's count of each decoder layer, summed.
LayerParameters all_layers(const ModelConfig& c) {
  const FamilySpec* family = find_family(c.model_type);
  if (family == nullptr) throw std::invalid_argument("no model family for model_type '" + c.model_type + "'");
  LayerParameters sum;
  for (std::int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    const LayerParameters p = family->layer_parameters(c, layer);
    sum.all += p.all;
    sum.token_matmul += p.token_matmul;
  }
  return sum;
}

}  // namespace

std::int64_t ModelConfig::num_non_embedding_parameters() const { return all_layers(*this).all + hidden_size; }  // + final norm

std::int64_t ModelConfig::token_matmul_parameters() const { return all_layers(*this).token_matmul; }

std::int64_t ModelConfig::num_active_parameters() const {
  if (!moe.any()) return num_parameters();
  const LayerParameters layers = all_layers(*this);
  return num_parameters() - layers.all + layers.token_matmul;  // norms and biases are small; the head counted whole
}

std::int64_t MoeShape::expert_capacity(std::int64_t rows) const {
  if (capacity_factor <= 0) return rows * experts_per_token;
  // Megatron's get_capacity(rows * k, E, factor): ceil(rows * k / E * factor).
  return static_cast<std::int64_t>(
      std::ceil(static_cast<double>(rows * experts_per_token) / static_cast<double>(num_experts) * capacity_factor));
}

bool MoeShape::routes(std::int64_t layer) const {
  if (num_experts <= 0 || sparse_step <= 0 || (layer + 1) % sparse_step != 0) return false;
  for (const std::int64_t d : dense_layers)
    if (d == layer) return false;
  return true;
}

std::string ModelConfig::summary() const {
  std::string s = model_type + " " + std::to_string(num_hidden_layers) + " layers, hidden " +
                  std::to_string(hidden_size) + ", " + std::to_string(num_attention_heads) +
                  " heads (" + std::to_string(num_key_value_heads) + " kv), ffn " +
                  std::to_string(intermediate_size) + ", vocab " + std::to_string(vocab_size);
  if (tie_word_embeddings) s += " tied";
  if (moe.any()) {
    s += ", " + std::to_string(moe.num_experts) + " experts (top " + std::to_string(moe.experts_per_token) +
         ", width " + std::to_string(moe.expert_intermediate_size) + ")";
    if (moe.shared_expert_intermediate_size > 0) s += " + a shared expert";
    return s + ": " + format_count(num_parameters()) + " parameters, " + format_count(num_active_parameters()) + " active";
  }
  return s + ": " + format_count(num_parameters()) + " parameters";
}

}  // namespace lft::model
