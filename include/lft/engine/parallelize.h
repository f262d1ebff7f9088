// parallelize(): a run's model built and laid over the mesh in one order, written once here and
// in docs/architecture.md ("The order of parallelize()"). The trainer's model, the DPO reference
// model and (on the meta device, without a mesh) the memory estimate and the planner build it
// through create_run_model; the trainer and the reference lay it out through parallelize().
//
//   1. float8 linears (fp8)                       create_run_model
//   2. LoRA adapters / frozen parameters          create_run_model
//   3. tensor + sequence parallel                 the engine's prepare (megatron: each rank's boxes)
//   4. expert parallel ([mesh] ep)               ExpertParallelEngine around the engine: its prepare
//                                                 takes this rank's experts out of the others' hands
//   5. context parallel                           the model's sequence exchange over the cp ranks
//   6. pipeline stages                            the engine's prepare (megatron: each stage's units)
//   7. recompute (gradient_checkpointing)         the model's layers
//   8. data parallel                              the engine's prepare: replicated (buckets) or
//                                                 sharded (the plan's ShardingPlan), over what 3-6
//                                                 left on the rank
// Steps 5 and 7 set how the forward runs and move no parameter; 3, 6 and 8 are the engine's
// prepare, which places the parameters, reading only this rank's share of the starting weights
// where the engine shards them.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <string>

#include "lft/engine/context_parallel.h"
#include "lft/engine/engine.h"
#include "lft/engine/run_plan.h"
#include "lft/mesh/device_mesh.h"
#include "lft/model/causal_lm.h"
#include "lft/model/weight_source.h"

namespace lft::engine {

struct ParallelModel {
  std::shared_ptr<model::CausalLM> model;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<CommSequenceExchange> cp;  // [mesh] cp > 1: the sequences' exchange
};

// The model's starting weights: `folder`'s (a Hugging Face model folder; "" = the seed's
// initialisation), and with LoRA the adapters of plan.adapter_folder (or PEFT's initialisation
// from the seed).
std::unique_ptr<model::WeightSource> starting_weights(const RunPlan& plan, model::CausalLM& model,
                                                      const std::string& folder);

// The plan's model on `device`, laid over `mesh` in the order above, its weights read from
// `folder` (starting_weights). Collective over the mesh.
ParallelModel parallelize(const RunPlan& plan, DeviceMesh& mesh, const c10::Device& device, const std::string& folder);

// While it lives, the forwards of a model that parallelize() built for `plan` run its base model:
// with LoRA the adapters off (what a DPO reference of a LoRA run computes); otherwise nothing
// changes (the model is its own base).
class BaseModelScope {
 public:
  explicit BaseModelScope(const RunPlan& plan);
  ~BaseModelScope();
  BaseModelScope(const BaseModelScope&) = delete;
  BaseModelScope& operator=(const BaseModelScope&) = delete;

 private:
  struct Off;
  std::unique_ptr<Off> off_;
};

}  // namespace lft::engine
