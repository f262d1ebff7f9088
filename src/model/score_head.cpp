#include "lft/model/score_head.h"

#include <sys/stat.h>

#include <cmath>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>

#include "lft/config/config.h"
#include "lft/model/hf_checkpoint.h"
#include "lft/model/init.h"
#include "lft/model/safetensors.h"

namespace lft::model {

bool is_value_head_parameter(const std::string& name) {
  return name == "v_head.summary.weight" || name == "v_head.summary.bias";
}

bool is_score_head_parameter(const std::string& name) {
  return is_value_head_parameter(name) || name == "score.weight" || name == "score.bias";
}

namespace {

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

std::optional<std::string> score_head_file(ScoreHead head, const std::string& model_folder,
                                           const std::string& adapter_folder) {
  if (head == ScoreHead::TokenClassification) {
    if (model_folder.empty()) return std::nullopt;
    for (const std::string& file : hf_weight_files(model_folder))
      if (read_safetensors_header(file).find("score.weight") != nullptr) return file;
    return std::nullopt;
  }
  const std::string& folder = adapter_folder.empty() ? model_folder : adapter_folder;
  if (folder.empty()) return std::nullopt;
  const std::string path = folder + (folder.back() == '/' ? "" : "/") + kValueHeadFile;
  if (!is_file(path)) return std::nullopt;
  return path;
}

ScoreHeadWeights::ScoreHeadWeights(const torch::nn::Module& model, const ModelConfig& config,
                                   std::unique_ptr<WeightSource> inner, std::optional<std::string> file,
                                   std::uint64_t seed)
    : inner_(std::move(inner)), file_(std::move(file)) {
  const bool value_head = config.score_head == ScoreHead::ValueHead;
  SafetensorsHeader header;
  if (file_) header = read_safetensors_header(*file_);
  const double bound = 1.0 / std::sqrt(static_cast<double>(config.hidden_size));
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    const std::string& name = item.key();
    if (!is_score_head_parameter(name)) continue;
    const std::vector<std::int64_t> shape = item.value().sizes().vec();
    if (file_) {
      if (header.find(name) == nullptr)
        throw config::ConfigError(*file_ + ": no tensor '" + name + "' (" +
                                  (value_head ? "a value head file holds v_head.summary.weight and v_head.summary.bias, as "
                                                "TRL and LlamaFactory save it"
                                              : "a token-classification reward model holds score.weight and score.bias") +
                                  ")");
      const at::Tensor stored = read_safetensors_tensor(*file_, header, name);
      if (!stored.sizes().equals(shape))
        throw config::ConfigError(*file_ + ": tensor '" + name + "' has shape " + c10::str(stored.sizes()) +
                                  ", the model's is " + c10::str(item.value().sizes()) + " (hidden_size " +
                                  std::to_string(config.hidden_size) + ")");
      head_[name] = stored.to(at::kFloat);
      continue;
    }
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(parameter_seed(name, seed));
    if (value_head) {
      // TRL's value head: nn.Linear's own initialisation (weight and bias uniform in +-1/sqrt(hidden)).
      head_[name] = at::empty(shape, at::kFloat).uniform_(-bound, bound, gen);
    } else if (name == "score.weight") {
      // LlamaFactory main's _init_score_head: small Gaussian weights, so the first loss is near ln 2.
      head_[name] = at::empty(shape, at::kFloat).normal_(0.0, 1.0 / (10.0 * static_cast<double>(config.hidden_size)), gen);
    } else {
      head_[name] = at::zeros(shape, at::kFloat);
    }
  }
}

void ScoreHeadWeights::read_rows(const std::string& name, std::int64_t row_begin, std::int64_t rows, at::Tensor out) const {
  const auto it = head_.find(name);
  if (it == head_.end()) return inner_->read_rows(name, row_begin, rows, out);
  at::NoGradGuard no_grad;
  out.copy_(it->second.narrow(0, row_begin, rows).view(out.sizes()));
}

std::string ScoreHeadWeights::describe() const {
  return inner_->describe() + " + the score head from " + (file_ ? *file_ : std::string("a new initialisation"));
}

}  // namespace lft::model
