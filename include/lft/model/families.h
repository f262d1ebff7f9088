// The model families this build trains, by config.json model_type. A family is one FamilySpec:
// how its config.json reads and writes, its model (the decoder block it builds a CausalLM from),
// and its chat template. Its embedding, final norm and head policy, and its init rule, are the
// ModelConfig fields its `read` sets (embedding_multiplier, unit_offset_norms,
// final_logit_softcapping; the init of norm weights follows unit_offset_norms).
// Adding a family: its own files (block, spec) and one line in src/model/families.cpp; no
// engine changes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <c10/core/TensorOptions.h>
#include <nlohmann/json.hpp>

#include "lft/model/causal_lm.h"
#include "lft/model/hf_config_reader.h"
#include "lft/model/model_config.h"

namespace lft::model {

// One decoder layer's parameters as a family builds it: every one, and the weights of the
// matmuls one token goes through (its FLOPs: 2 per weight forward). A dense layer's are its
// projections; a mixture of experts' would be its router and the experts a token is sent to.
struct LayerParameters {
  std::int64_t all = 0;
  std::int64_t token_matmul = 0;
};

// The Llama layer's (q, k, v, o, gate, up, down, norms, and the biases and q/k norms its config
// asks for): every family of this build so far.
LayerParameters llama_layer_parameters(const ModelConfig& c, std::int64_t layer);

struct FamilySpec {
  std::string model_type;    // config.json "model_type"
  std::string architecture;  // config.json "architectures"[0], written on export
  // transformers' max_position_embeddings when config.json has none.
  std::int64_t default_max_positions = 2048;
  // The family's own fields of config.json, read into `c` after the common ones (sizes, heads,
  // head_dim when given, RoPE, rms_norm_eps, tie_word_embeddings when given).
  void (*read)(const HfConfigReader& r, ModelConfig& c) = nullptr;
  // The same fields written back (export), into `j` after the common ones.
  void (*write)(const ModelConfig& c, nlohmann::ordered_json& j) = nullptr;
  std::shared_ptr<CausalLM> (*create)(const ModelConfig& c, const c10::TensorOptions& options) = nullptr;
  // LlamaFactory's `template` for the family's chat models ("" when the build has none).
  std::string chat_template;
  // Its layer `layer`'s parameter counts: the parameter count, the memory estimate's and the
  // planner's model sizes and the FLOP/s line ask the family (ModelConfig::layer_parameters).
  LayerParameters (*layer_parameters)(const ModelConfig& c, std::int64_t layer) = llama_layer_parameters;
};

// A FamilySpec's `create` for a CausalLM subclass constructed from (config, options).
template <class Model>
std::shared_ptr<CausalLM> create_model(const ModelConfig& c, const c10::TensorOptions& options) {
  return std::make_shared<Model>(c, options);
}

const std::vector<FamilySpec>& families();
// The family of `model_type`; null when this build has none.
const FamilySpec* find_family(const std::string& model_type);
// "llama, qwen2, mistral, qwen3, gemma2" (messages).
std::string family_names();

// The model of `config.model_type`, parameters created with `options` (see CausalLM).
std::shared_ptr<CausalLM> create_causal_lm(const ModelConfig& config, const c10::TensorOptions& options = {});

}  // namespace lft::model
