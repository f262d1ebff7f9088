// Loading a Hugging Face model folder's weights (model.safetensors, or the shards listed in
// model.safetensors.index.json) into a module whose parameter names are the HF names.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lft/model/prequantized.h"
#include "lft/model/safetensors.h"
#include "lft/model/weight_source.h"

#include <torch/ordered_dict.h>
#include <ATen/core/Tensor.h>

namespace torch::nn {
class Module;
}

namespace lft::model {

// The weight files of a model folder, as full paths: the shards named in
// model.safetensors.index.json's weight_map (sorted, unique), else model.safetensors. Throws
// lft::config::ConfigError when there is neither, or the index is malformed.
std::vector<std::string> hf_weight_files(const std::string& folder);

// A model folder's weights, checked against a model's parameters from the file headers alone:
// a parameter missing from the checkpoint, a checkpoint tensor the model lacks, a tensor in two
// files, or a shape mismatch is a ConfigError naming the tensor and file. Ignored:
// "*.rotary_emb.inv_freq" (old conversions), and "lm_head.weight" when the model has no lm_head
// (tied) and the tensor equals model.embed_tokens.weight (compared in blocks of rows). Tensor
// data is read only by read_rows, one pread of the rows asked for (bf16/fp16/fp32 converted to
// the destination's dtype). A mixture of experts' experts load from either layout: one tensor
// per expert (the Hub's, ...experts.<e>.<gate_proj|w1>.weight) or transformers 5's fused
// ...experts.gate_up_proj [E, 2I, H] (gate rows first) and ...experts.down_proj [E, H, I]; a
// Mixtral router saved as ...mlp.gate.weight loads into block_sparse_moe.gate.weight.
class HfWeights final : public WeightSource {
 public:
  // `not_in_folder`: parameters the folder need not hold (a fine-tuning run's adapters, read from
  // elsewhere); `not_in_model`: the folder's tensors the model leaves out (a token-classification
  // reward model's lm_head).
  HfWeights(const std::string& folder, torch::nn::Module& model,
            const std::function<bool(const std::string&)>& not_in_folder = {},
            const std::function<bool(const std::string&)>& not_in_model = {});
  void read_rows(const std::string& name, std::int64_t row_begin, std::int64_t rows,
                 at::Tensor out) const override;
  std::string describe() const override { return folder_; }
  // A linear a folder saved by bitsandbytes holds in 4 bits (prequantized.h); read_rows gives
  // its rows dequantized to float32.
  std::shared_ptr<const Quantized4bit> quantized_weight(const std::string& name,
                                                        const std::vector<std::int64_t>& shape) const override;

 private:
  struct Location {
    std::string file;
    const SafetensorsHeader* header;
    // A mixture of experts' fused tensor (transformers 5's in-memory layout): this parameter is
    // expert `expert`'s rows [row_offset, row_offset + rows of the parameter) of tensor `source`.
    std::string source;
    std::int64_t expert = -1, row_offset = 0;
  };
  // Maps a fused experts tensor (<block>.experts.gate_up_proj [E, 2I, H] or .down_proj [E, H, I])
  // onto the per-expert parameters; false when `name` is none or the model has no such experts.
  bool map_fused_experts(const std::string& name, const std::string& file, const SafetensorsHeader& header,
                         const SafetensorsEntry& entry, const torch::OrderedDict<std::string, at::Tensor>& params);
  void check_tied_head(const Location& head, const Location& embed) const;

  std::string folder_;
  std::map<std::string, SafetensorsHeader> headers_;  // per file
  std::map<std::string, Location> tensors_;           // per parameter name
  std::unique_ptr<Bnb4bitTensors> bnb_;               // the 4-bit weights and their parts
  std::map<std::string, std::vector<std::int64_t>> bnb_shapes_;  // their parameters' shapes
};

// A 64-bit content hash of a model folder's config.json and weight files (hf_weight_files), as
// 16 hex digits: what a LoRA or freeze checkpoint records of the base it was trained on. Reads
// every byte (about 2 GB/s). ConfigError when a file cannot be read.
std::string model_folder_hash(const std::string& folder);

// Copies every checkpoint tensor into the parameter of the same name, converted to the
// parameter's dtype and device (no autograd history), with HfWeights' checks.
void load_hf_checkpoint(torch::nn::Module& model, const std::string& folder);

}  // namespace lft::model
