// A reward model's score head (ModelConfig::score_head, stage = "rm"): its parameter names, where
// its starting weights come from, and the file it is saved in.
//
// LlamaFactory's classic reward model is TRL's AutoModelForCausalLMWithValueHead: the causal LM
// (its lm_head kept, unused) and `v_head.summary` (Linear(hidden, 1) with a bias) saved apart in
// value_head.safetensors. LlamaFactory reads that file from the last adapter folder when one is
// given, else from the model folder, and starts a new head otherwise (TRL: torch's nn.Linear
// initialisation, kaiming-uniform bounds 1/sqrt(hidden) for weight and bias).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lft/model/model_config.h"
#include "lft/model/weight_source.h"

namespace torch::nn {
class Module;
}

namespace lft::model {

// TRL's file name of a value head beside a model or adapter.
inline constexpr const char* kValueHeadFile = "value_head.safetensors";

// The head a stage trains: rm, LlamaFactory's classic reward model, TRL's value head; else none.
inline ScoreHead score_head_of_stage(const std::string& stage) {
  return stage == "rm" ? ScoreHead::ValueHead : ScoreHead::None;
}

// v_head.summary.weight, v_head.summary.bias.
bool is_score_head_parameter(const std::string& name);

// The value head file a run starts from: <adapter_folder>/value_head.safetensors when an adapter
// is given, else <model_folder>/value_head.safetensors; nullopt when that file does not exist.
std::optional<std::string> value_head_file(const std::string& model_folder, const std::string& adapter_folder);

// `inner` for every parameter but the score head's, which come from `file` (a value head's
// safetensors, checked against the model's shapes) or, without one, a new head drawn from `seed`.
class ScoreHeadWeights final : public WeightSource {
 public:
  ScoreHeadWeights(const torch::nn::Module& model, const ModelConfig& config, std::unique_ptr<WeightSource> inner,
                   std::optional<std::string> file, std::uint64_t seed);
  void read_rows(const std::string& name, std::int64_t row_begin, std::int64_t rows, at::Tensor out) const override;
  std::string describe() const override;
  std::shared_ptr<const Quantized4bit> quantized_weight(const std::string& name,
                                                        const std::vector<std::int64_t>& shape) const override {
    return inner_->quantized_weight(name, shape);
  }

 private:
  std::unique_ptr<WeightSource> inner_;
  std::optional<std::string> file_;
  std::map<std::string, at::Tensor> head_;  // the score head's starting tensors, whole
};

}  // namespace lft::model
