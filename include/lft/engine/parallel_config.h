// The parallel plan's decoders (parallel_config.cpp, megatron_config.cpp): `distributed`,
// [dist_config], [mesh] cp and the DeepSpeed file read into a ParallelPlan, with every impossible
// or contradicting setting a config::ConfigError that names its key. Only resolve_run_plan (and
// the layout planner, which resolves candidate configurations) call them.
#pragma once

#include <optional>

#include "lft/config/config.h"
#include "lft/engine/parallel_plan.h"
#include "lft/engine/registry.h"
#include "lft/engine/run_plan.h"
#include "lft/model/causal_lm.h"

namespace lft::engine {

// The parallel plan of `cfg` for `run` (its model, mesh, batch and precision already resolved),
// checked against `meta`, the run's model on the meta device.
ParallelPlan resolve_parallel_plan(const config::Config& cfg, const RunPlan& run, const model::CausalLM& meta);

// The engine `cfg` asks for. An engine name the schema knows but this build lacks is a
// ConfigError that names the key's location and lists the available engines.
const EngineInfo& engine_for(const config::Config& cfg);

// The sharded data-parallel policy of fsdp2, fsdp and deepspeed; nullopt where the algorithm is
// all-reduce (fsdp NO_SHARD, ZeRO stage 0; and the other presets).
std::optional<ShardingPlan> sharding_plan(const config::Config& cfg, const RunPlan& run);

// megatron's plan, validated against the model (its layers and its parameters' roles; a model
// built on the meta device will do) and the mesh, and, where the pipeline's messages go over
// NCCL (`nccl`), against NCCL's ordering of them.
MegatronPlan make_megatron_plan(const config::Config& cfg, const model::CausalLM& model, const MeshShape& mesh,
                                bool nccl = false);

// megatron's sharding strategies put the data-parallel ranks on dp_shard by default; the
// all-reduce and use_distributed_optimizer on dp_replicate (EngineInfo::fill_dim_for).
MeshDim megatron_fill_dim(const config::Config& cfg);

// The strategy `dist_config.data_parallel_sharding_strategy` (or use_distributed_optimizer) asks
// for, before the mesh is known (the default mesh puts the data-parallel ranks on dp_shard when it
// shards).
DpSharding dp_sharding_of(const config::Config& cfg);

// ConfigError naming the keys when [mesh] cp > 1 cannot run: under Ulysses, attention heads that
// do not divide over cp (x tp) (each cp rank attends with a share of them; key/value heads that do
// not divide are repeated per query head before the exchange). Ring attention keeps every head.
void check_context_parallel(const config::Config& cfg, const model::ModelConfig& model, int cp, int tp);

}  // namespace lft::engine
