// How the megatron engine lays a model over a pipeline x data x tensor mesh: which decoder layers
// each (virtual) pipeline stage runs, and which box of each parameter a tensor-parallel rank holds.
//
// Tensor parallel follows each parameter's role, as the model declares it (model::TpSplit):
//   column-parallel    rows (dim 0) of whole groups (heads; single rows of the MLP); a group
//                      count that tp is a multiple of (kv heads) is shared: each of the
//                      tp / groups ranks serving the same query heads holds a replica
//   row-parallel       the columns (dim 1) of this rank's groups
//   vocab-parallel     rows of the vocabulary (ceil split: the last ranks may hold fewer rows)
//   replicated         whole on every rank
// An uneven split needs no padding: every collective moves [tokens, hidden] or [tokens] values,
// whatever the local width, so nothing padded can reach the loss.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lft/engine/dp_sharding.h"
#include "lft/engine/pipeline_schedule.h"
#include "lft/engine/sharded_data_parallel.h"
#include "lft/mesh/device_mesh.h"
#include "lft/model/causal_lm.h"

namespace lft::engine {

struct MegatronPlan {
  int tp = 1;
  int pp = 1;
  int virtual_stages = 1;  // v
  bool sequence_parallel = false;
  DpSharding dp_sharding = DpSharding::NoShard;
  // use_distributed_optimizer: Optim over every data-parallel rank (dp_replicate x dp_shard x cp);
  // otherwise a sharding strategy cuts over dp_shard x cp and replicates over dp_replicate (HSDP).
  bool distributed_optimizer = false;
  PipelineScheduleKind schedule = PipelineScheduleKind::OneFOneB;
  std::int64_t micro_batches = 1;
  // Per global virtual stage g = chunk * pp + stage: its decoder layers [first, second).
  std::vector<std::pair<std::int64_t, std::int64_t>> stage_layers;

  int virtual_stage(int stage, int chunk) const { return chunk * pp + stage; }
  int last_virtual_stage() const { return pp * virtual_stages - 1; }
};

// The sharded component's plan for plan.dp_sharding: per-parameter cuts (a box's shards are
// boxes of it), parameters gathered in `compute` with optim_grads_params.
ShardingPlan megatron_sharding_plan(const MegatronPlan& plan, at::ScalarType compute);

// The box a tensor-parallel rank holds of a parameter.
struct TpSlice {
  int dim = -1;  // -1: whole (replicated over tp)
  std::int64_t begin = 0;
  std::int64_t count = 0;
  int holders = 1;  // tensor-parallel ranks that hold this same box (norms: tp)
  int holder = 0;   // which of them this rank is
};
TpSlice tp_slice(const model::TpSplit& split, int tp, int tp_rank);

// The pipeline stage that runs `unit` of `model`: the embedding on the first, the head on the
// last, a decoder layer on the stage of its virtual stage.
int stage_of_unit(const MegatronPlan& plan, const model::CausalLM& model, std::int64_t unit);

}  // namespace lft::engine
