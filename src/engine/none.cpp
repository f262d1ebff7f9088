#include "lft/engine/none.h"

#include "lft/model/causal_lm.h"

namespace lft::engine {

NoneEngine::NoneEngine(const EngineContext& ctx) : device_(ctx.mesh.device()) {}

void NoneEngine::prepare(model::CausalLM& model) {
  for (const auto& item : model.named_parameters()) {
    if (!item.value().requires_grad()) continue;
    names_.push_back(item.key());
    params_.push_back(item.value());
  }
}

}  // namespace lft::engine
