// Which parameters train (LlamaFactory's finetuning_type; docs/finetuning.md):
//   full    every parameter
//   freeze  the decoder layers and modules the freeze_* keys choose (LlamaFactory's rules)
//   lora    low-rank adapters (PEFT's LoRA; with use_dora PEFT's DoRA) beside the lora_target
//           linears of the decoder layers, and the additional_target modules whole; the base
//           weights frozen
// A frozen parameter has requires_grad false: the engines give it no gradient, no optimizer state
// and no gradient communication, and checkpoints do not hold it.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <c10/core/TensorOptions.h>

#include "lft/model/causal_lm.h"
#include "lft/model/model_config.h"

namespace lft::model {

struct FinetuningSpec {
  std::string type = "full";  // full, freeze, lora
  std::int64_t lora_rank = 8;
  double lora_alpha = 16;
  double lora_dropout = 0;
  bool use_rslora = false;
  bool use_dora = false;  // a magnitude vector per adapted linear (layers.h)
  std::vector<std::string> lora_target{"all"};  // module names, or "all"
  std::vector<std::string> additional_target;
  std::int64_t freeze_trainable_layers = 2;  // last n (> 0) or first -n (< 0)
  std::vector<std::string> freeze_trainable_modules{"all"};
  std::vector<std::string> freeze_extra_modules;
  // A quantized base (QLoRA, LlamaFactory's quantization_* keys): 0 (none) or 4 bits, bitsandbytes'
  // NF4 or FP4, with or without double quantization (quantized_base.h).
  int quantization_bit = 0;
  std::string quantization_type = "nf4";
  bool double_quantization = true;

  // PEFT's: alpha / r, or alpha / sqrt(r) with use_rslora.
  double lora_scaling() const;
};

// A module name that the model does not have; `key` is the config key that named it.
class FinetuningError : public std::invalid_argument {
 public:
  FinetuningError(std::string config_key, const std::string& what)
      : std::invalid_argument(what), key(std::move(config_key)) {}
  std::string key;
};

// Adds the adapters (created with `options`; without memory inside an UnallocatedParameters
// scope) and freezes every parameter that does not train. Throws FinetuningError.
void apply_finetuning(CausalLM& model, const FinetuningSpec& spec, const c10::TensorOptions& options = {});

// The decoder-layer linears lora_target names ("all": every one), as module names in model order
// ("model.layers.0.self_attn.q_proj", ...), and their distinct short names ("q_proj", ...).
std::vector<std::string> lora_target_modules(const CausalLM& model, const FinetuningSpec& spec);
std::vector<std::string> lora_target_names(const CausalLM& model, const FinetuningSpec& spec);

// "<linear>.lora_A.weight", "<linear>.lora_B.weight" or DoRA's "<linear>.lora_magnitude_vector".
bool is_lora_parameter(const std::string& name);
bool is_dora_magnitude(const std::string& name);
// The base weight ("<linear>.weight") whose row norms start DoRA's magnitude `name`.
std::string dora_base_weight(const std::string& magnitude_name);

}  // namespace lft::model
