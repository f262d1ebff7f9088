#include "lft/model/families.h"

#include <functional>
#include <stdexcept>

#include "lft/model/llama.h"
#include "lft/model/qwen3.h"

namespace lft::model {
namespace {

using Create = std::function<std::shared_ptr<CausalLM>(const ModelConfig&, const c10::TensorOptions&)>;

template <class Impl>
std::shared_ptr<CausalLM> make(const ModelConfig& config, const c10::TensorOptions& options) {
  return std::make_shared<Impl>(config, options);
}

struct Family {
  std::string model_type;
  Create create;
};

const std::vector<Family>& families() {
  static const std::vector<Family> all = {
      {"llama", make<LlamaForCausalLMImpl>},
      {"qwen2", make<LlamaForCausalLMImpl>},
      {"mistral", make<LlamaForCausalLMImpl>},
      {"qwen3", make<Qwen3ForCausalLMImpl>},
  };
  return all;
}

}  // namespace

std::shared_ptr<CausalLM> create_causal_lm(const ModelConfig& config, const c10::TensorOptions& options) {
  for (const Family& f : families())
    if (f.model_type == config.model_type) return f.create(config, options);
  throw std::invalid_argument("no model family for model_type '" + config.model_type + "'");
}

}  // namespace lft::model
