// The model families this build trains, by config.json model_type. A new family adds its own
// files (a DecoderBlock and a CausalLM subclass) and one line in src/model/families.cpp; no
// engine changes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <c10/core/TensorOptions.h>

#include "lft/model/causal_lm.h"
#include "lft/model/model_config.h"

namespace lft::model {

// The model of `config.model_type`, parameters created with `options` (see CausalLM).
std::shared_ptr<CausalLM> create_causal_lm(const ModelConfig& config, const c10::TensorOptions& options = {});

}  // namespace lft::model
