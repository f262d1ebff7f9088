#include "lft/engine/none.h"

#include <torch/nn/module.h>

namespace lft::engine {

NoneEngine::NoneEngine(const EngineContext&) {}

void NoneEngine::prepare(torch::nn::Module& model) {
  for (const auto& item : model.named_parameters()) {
    if (!item.value().requires_grad()) continue;
    names_.push_back(item.key());
    params_.push_back(item.value());
  }
}

}  // namespace lft::engine
