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
