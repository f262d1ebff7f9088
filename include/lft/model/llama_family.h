// The families built from Llama's block (llama.h): Llama, Qwen2 and Mistral. They differ in
// config.json only: biases, sliding windows and defaults.
#pragma once

#include "lft/model/families.h"

namespace lft::model {

FamilySpec llama_family();
FamilySpec qwen2_family();
FamilySpec mistral_family();

// What the Llama-block families share: hidden_act must be silu. (Qwen3 reads it too.)
void read_silu_activation(const HfConfigReader& r, ModelConfig& c);
// Qwen2 and Qwen3's `use_sliding_window` / `sliding_window` / `max_window_layers`, read and written.
void read_qwen_sliding_window(const HfConfigReader& r, ModelConfig& c);
void write_qwen_sliding_window(const ModelConfig& c, nlohmann::ordered_json& j);

}  // namespace lft::model
