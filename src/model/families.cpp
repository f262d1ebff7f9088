// The list of model families: one line each.
#include "lft/model/families.h"

#include <stdexcept>

#include "lft/model/gemma.h"
#include "lft/model/gemma2.h"
#include "lft/model/llama_family.h"
#include "lft/model/moe_families.h"
#include "lft/model/qwen3.h"

namespace lft::model {

const std::vector<FamilySpec>& families() {
  static const std::vector<FamilySpec> all = {
      llama_family(), qwen2_family(), mistral_family(), qwen3_family(), gemma2_family(), gemma_family(),
      qwen3_moe_family(), qwen2_moe_family(), mixtral_family(),
  };
  return all;
}

const FamilySpec* find_family(const std::string& model_type) {
  for (const FamilySpec& f : families())
    if (f.model_type == model_type) return &f;
  return nullptr;
}

std::string family_names() {
  std::string names;
  for (const FamilySpec& f : families()) names += (names.empty() ? "" : ", ") + f.model_type;
  return names;
}

std::shared_ptr<CausalLM> create_causal_lm(const ModelConfig& config, const c10::TensorOptions& options) {
  const FamilySpec* family = find_family(config.model_type);
  if (family == nullptr)
    throw std::invalid_argument("no model family for model_type '" + config.model_type + "' (this build has " +
                                family_names() + ")");
  return family->create(config, options);
}

}  // namespace lft::model
