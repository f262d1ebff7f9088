// `lftrain --init-model DIR [--tokenizer TDIR] run.toml`: the run's [model] table, initialised
// from `seed` exactly as a training run starts, written as a Hugging Face model folder that
// `model_name_or_path` (and transformers) can load. How the bundled SFT example gets its model.
#pragma once

#include <string>

#include "lft/config/config.h"
#include "lft/model/model_config.h"

namespace lft::app {

// Writes DIR/config.json and DIR/model.safetensors, and copies tokenizer.json and
// tokenizer_config.json from `tokenizer_dir` when it is not empty. Throws UsageError when a
// tokenizer file is missing or a file cannot be written.
void write_initial_model(const config::Config& cfg, const model::ModelConfig& model_config,
                         const std::string& dir, const std::string& tokenizer_dir);

}  // namespace lft::app
