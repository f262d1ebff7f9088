// The planner's decoder (planner_config.cpp): the only code of src/plan that reads configuration
// keys.
#pragma once

#include <cstdint>
#include <memory>

#include "lft/config/config.h"
#include "lft/model/causal_lm.h"
#include "lft/plan/cost_model.h"
#include "lft/plan/layout.h"
#include "lft/plan/planner.h"

namespace lft::plan {

// What a configuration sets of a step's cost, beside its layout.
struct ConfigSettings {
  std::int64_t seq_len = 0;        // cutoff_len
  int compute_bytes = 4;           // 2 with bf16 / fp16
  double ddp_bucket_bytes = 0;     // ddp_bucket_cap_mb
};
ConfigSettings config_settings(const config::Config& cfg);

// The run's model on the meta device, with its adapters and frozen parameters: shapes, no memory.
std::shared_ptr<model::CausalLM> meta_model(const config::Config& cfg);

// The cost model's input of `layout` on `r`'s cluster for a model of `shape`.
StepInput step_input(const PlanRequest& r, const ModelShape& shape, const config::Config& cfg, const Layout& l);

}  // namespace lft::plan
