// The training stages (LlamaFactory's `stage`), as every layer that branches on one names them.
#pragma once

#include <string>

namespace lft {

// The stages that train on preference pairs (a chosen and a rejected sequence per sample): dpo,
// and rm (a reward model ranking the two).
inline bool trains_on_pairs(const std::string& stage) { return stage == "dpo" || stage == "rm"; }

}  // namespace lft
