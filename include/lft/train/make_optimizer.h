// The optimizer a run asks for (AdamW, or Muon with `use_muon`) over the tensors its engine
// updates, wired to the engine's layout (Muon gathers whole matrices over its row-piece group).
#pragma once

#include <memory>

#include "lft/engine/engine.h"
#include "lft/optim/optimizer.h"
#include "lft/train/train_options.h"

namespace lft::train {

// Collective (Muon exchanges the pieces' row ranges once).
std::unique_ptr<optim::Optimizer> make_optimizer(engine::Engine& engine, const TrainOptions& options);

}  // namespace lft::train
