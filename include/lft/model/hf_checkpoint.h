// Loading a Hugging Face model folder's weights (model.safetensors, or the shards listed in
// model.safetensors.index.json) into a module whose parameter names are the HF names.
#pragma once

#include <string>
#include <vector>

namespace torch::nn {
class Module;
}

namespace lft::model {

// The weight files of a model folder, as full paths: the shards named in
// model.safetensors.index.json's weight_map (sorted, unique), else model.safetensors. Throws
// lft::config::ConfigError when there is neither, or the index is malformed.
std::vector<std::string> hf_weight_files(const std::string& folder);

// Copies every checkpoint tensor into the parameter of the same name, converted to the
// parameter's dtype and device (no autograd history). Strict: a parameter missing from the
// checkpoint, a checkpoint tensor the model lacks, or a shape mismatch is a ConfigError naming
// the tensor and file. Ignored: "*.rotary_emb.inv_freq" (old conversions), and "lm_head.weight"
// when the model has no lm_head (tied) and the tensor equals model.embed_tokens.weight.
void load_hf_checkpoint(torch::nn::Module& model, const std::string& folder);

}  // namespace lft::model
