// Gemma (model_type gemma, GemmaForCausalLM): Llama's block and model with Gemma's hooks, all
// config fields its spec sets: embeddings scaled by sqrt(hidden_size), RMSNorms that scale by
// (1 + weight) (weights start at 0), a GELU-tanh MLP, head_dim 256 by default, the head tied to
// the embedding by default. Numerics follow transformers' modeling_gemma.
#pragma once

#include "lft/model/families.h"

namespace lft::model {

FamilySpec gemma_family();

// What Gemma and Gemma2 read alike: the GELU-tanh activation from `field` (the legacy "gelu"
// meaning it, as transformers reads it), no bidirectional attention, head_dim (256) and
// tie_word_embeddings (true) defaults, attention_bias, and the hooks (embedding scale, (1 + w)
// norms).
void read_gemma_common(const HfConfigReader& r, ModelConfig& c, const std::string& field);

}  // namespace lft::model
