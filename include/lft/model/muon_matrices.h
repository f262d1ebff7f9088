// Which parameters Muon orthogonalises (LlamaFactory's rule, docs/optimizer.md): the
// optimizer gets the answer per tensor; the memory estimate counts them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lft/model/causal_lm.h"

namespace lft::model {

// A matrix that is not the embedding or the head, and not a routed expert's (a 3-d tensor in
// transformers 5, which LlamaFactory gives to AdamW); with `adapters` false not LoRA's either
// (v1's rule; the classic trainer's gives LoRA's A and B to Muon).
bool muon_matrix(const std::string& name, const std::vector<std::int64_t>& shape, bool adapters = true);

// Elements of the trained parameters of `model` that muon_matrix takes.
double muon_matrix_elements(const CausalLM& model, bool adapters);

}  // namespace lft::model
