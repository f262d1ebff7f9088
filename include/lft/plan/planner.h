// lftrain --plan: every layout of a config on a cluster, validated and sized by the engines
// themselves (engine::resolve_run_plan), predicted by the cost model (cost_model.h) and ranked
// by tokens/s; or the prediction for the config's own layout (docs/plan.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lft/config/config.h"
#include "lft/engine/megatron_plan.h"
#include "lft/model/causal_lm.h"
#include "lft/plan/cluster.h"
#include "lft/plan/cost_model.h"
#include "lft/plan/layout.h"

namespace lft::plan {

struct PlanRequest {
  Cluster cluster;
  std::string config_text;             // the run config, as lftrain reads it
  std::string config_name;             // its file name (TOML or YAML by the extension)
  std::vector<std::string> overrides;  // key=value from the command line
  int top = 10;                        // layouts to rank
  std::vector<engine::EnginePreset> engines;  // ddp, fsdp2, deepspeed, megatron; empty: all
};

struct Candidate {
  Layout layout;
  std::vector<std::string> overrides;  // key=value that select the layout over the config
  StepPrediction prediction;
  std::string memory_report;  // engine::MemoryEstimate::str() of the layout
  bool fits = false;
};

// What the engines said of one engine's layouts.
struct EngineVerdict {
  engine::EnginePreset engine = engine::EnginePreset::None;
  int predicted = 0;  // layouts the planner predicted
  int refused = 0;    // layouts the engine refused (config::ConfigError)
  std::string first_refusal;
};

struct PlanResult {
  std::string model_summary;  // ModelConfig::summary()
  ModelShape model;
  std::int64_t global_batch = 0;  // sequences per step, the config's own
  std::int64_t seq_len = 0;
  std::vector<Candidate> ranked;      // layouts that fit, best first, at most `top`
  std::optional<Candidate> smallest;  // when none fits: the layout with the least memory
  int sized = 0;                      // layouts whose memory was estimated
  std::vector<EngineVerdict> engines;
};

// The shape of a (meta-device) model as the cost model reads it.
ModelShape model_shape(const model::CausalLM& model);

// Megatron's own split of `model` under `plan`: decoder layers per pipeline stage, and the
// tensor-parallel boxes of the stage with the most trained elements (what its data parallelism
// reduces or shards): its layers, parameters and trained elements, and the root unit's share.
struct MegatronShares {
  std::vector<std::int64_t> stage_layers;
  ModelShape stage_box;
};
MegatronShares megatron_shares(const model::CausalLM& model, const engine::MegatronPlan& plan);

// The global batch every layout keeps: the config's per_device_train_batch_size x
// gradient_accumulation_steps x its data-parallel size on `world` ranks (engine "none": as ddp).
std::int64_t config_global_batch(const config::Config& cfg, int world);

// Predicts every layout, then sizes them in predicted order until `top` fit in the cluster's
// usable memory. Throws config::ConfigError when the config itself does not parse.
PlanResult make_plan(const PlanRequest& request);

// The config's own layout (engine, [mesh] on the cluster's ranks, batch, checkpointing): one
// candidate with every collective (--this-layout). Throws config::ConfigError when the engine
// refuses it.
Candidate predict_config_layout(const PlanRequest& request, PlanResult& context);

}  // namespace lft::plan
