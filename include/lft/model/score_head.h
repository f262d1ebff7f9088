// A reward model's score head (ModelConfig::score_head, stage = "rm"): its parameter names, where
// its starting weights come from, and the file it is saved in.
//
// LlamaFactory's classic reward model is TRL's AutoModelForCausalLMWithValueHead: the causal LM
// (its lm_head kept, unused) and `v_head.summary` (Linear(hidden, 1) with a bias) saved apart in
// value_head.safetensors. LlamaFactory reads that file from the last adapter folder when one is
// given, else from the model folder, and starts a new head otherwise (TRL: torch's nn.Linear
// initialisation, kaiming-uniform bounds 1/sqrt(hidden) for weight and bias).
//
// LlamaFactory main's v1 reward model (`model_class: cls`) is transformers'
// ...ForTokenClassification with one label: the decoder without lm_head and `score` (Linear(hidden,
// 1) with a bias), saved with the model. A new head is drawn as main draws it (weight normal with
// std 1 / (10 hidden), bias 0); a folder that holds score.weight and score.bias (a saved reward
// model) gives them (main draws a new head at every start).
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

// The head a stage trains: rm's (`rm_head`: value_head, TRL's; score, transformers' token
// classification); else none.
inline ScoreHead score_head_of_stage(const std::string& stage, const std::string& rm_head) {
  if (stage != "rm") return ScoreHead::None;
  return rm_head == "score" ? ScoreHead::TokenClassification : ScoreHead::ValueHead;
}

// `config` made the model of a stage (stage, rm_head): its score head, and a token-classification
// reward model's embedding untied (it has no LM head to tie it to).
inline void set_score_head(ModelConfig& config, const std::string& stage, const std::string& rm_head) {
  config.score_head = score_head_of_stage(stage, rm_head);
  if (config.score_head == ScoreHead::TokenClassification) config.tie_word_embeddings = false;
}

// Either head's parameters: v_head.summary.{weight,bias}, score.{weight,bias}.
bool is_score_head_parameter(const std::string& name);
// TRL's value head's, which are saved apart (value_head.safetensors).
bool is_value_head_parameter(const std::string& name);

// The file a run's score head starts from: for a value head <adapter_folder>/value_head.safetensors
// when an adapter is given, else <model_folder>/value_head.safetensors; for `score` the model
// folder's weight file that holds score.weight. nullopt when there is none.
std::optional<std::string> score_head_file(ScoreHead head, const std::string& model_folder,
                                           const std::string& adapter_folder);

// `inner` for every parameter but the score head's, which come from `file` (score_head_file,
// checked against the model's shapes) or, without one, a new head drawn from `seed`.
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
