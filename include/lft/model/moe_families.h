// The mixture-of-experts families (moe.h): Qwen3-MoE (qwen3_moe: Qwen3's attention, routed
// experts), Qwen2-MoE (qwen2_moe: Qwen2's attention, routed experts and a gated shared expert)
// and Mixtral (mixtral: Mistral's attention, routed experts under block_sparse_moe).
#pragma once

#include "lft/model/families.h"

namespace lft::model {

FamilySpec qwen3_moe_family();
FamilySpec qwen2_moe_family();
FamilySpec mixtral_family();

}  // namespace lft::model
