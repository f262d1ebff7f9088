#include "lft/model/score_head.h"

#include <sys/stat.h>

#include <cmath>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>

#include "lft/config/config.h"
#include "lft/model/init.h"
#include "lft/model/safetensors.h"

namespace lft::model {

bool is_score_head_parameter(const std::string& name) {
  return name == "v_head.summary.weight" || name == "v_head.summary.bias";
}

std::optional<std::string> value_head_file(const std::string& model_folder, const std::string& adapter_folder) {
  const std::string& folder = adapter_folder.empty() ? model_folder : adapter_folder;
  if (folder.empty()) return std::nullopt;
  const std::string path = folder + (folder.back() == '/' ? "" : "/") + kValueHeadFile;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  return path;
}

ScoreHeadWeights::ScoreHeadWeights(const torch::nn::Module& model, const ModelConfig& config,
                                   std::unique_ptr<WeightSource> inner, std::optional<std::string> file,
                                   std::uint64_t seed)
    : inner_(std::move(inner)), file_(std::move(file)) {
  std::map<std::string, at::Tensor> stored;
  if (file_) stored = read_safetensors(*file_);
  const double bound = 1.0 / std::sqrt(static_cast<double>(config.hidden_size));
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    const std::string& name = item.key();
    if (!is_score_head_parameter(name)) continue;
    const std::vector<std::int64_t> shape = item.value().sizes().vec();
    if (file_) {
      const auto it = stored.find(name);
      if (it == stored.end())
        throw config::ConfigError(*file_ + ": no tensor '" + name + "' (a value head file holds v_head.summary.weight and "
                                  "v_head.summary.bias, as TRL and LlamaFactory save it)");
      if (!it->second.sizes().equals(shape))
        throw config::ConfigError(*file_ + ": tensor '" + name + "' has shape " + c10::str(it->second.sizes()) +
                                  ", the model's is " + c10::str(item.value().sizes()) + " (hidden_size " +
                                  std::to_string(config.hidden_size) + ")");
      head_[name] = it->second.to(at::kFloat);
      continue;
    }
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(parameter_seed(name, seed));
    // TRL's value head: nn.Linear's own initialisation (weight and bias uniform in +-1/sqrt(hidden)).
    head_[name] = at::empty(shape, at::kFloat).uniform_(-bound, bound, gen);
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
