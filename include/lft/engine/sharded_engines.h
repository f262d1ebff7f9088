// The `distributed` values served by ShardedEngine (sharded.h): fsdp2, fsdp and deepspeed each
// have their options read into the plan's ShardingPlan (parallel_config.cpp), or are answered
// by the ddp engine (under their own name) where the algorithm is all-reduce (fsdp NO_SHARD,
// ZeRO stage 0).
//   fsdp2      [dist_config] mixed_precision, reshard_after_forward, offload_params, pin_memory
//   fsdp       [dist_config] sharding_strategy, mixed_precision
//   deepspeed  the JSON file of key `deepspeed` (ZeRO stage, bf16, offload, ...), in the run plan
#pragma once

#include <memory>
#include "lft/engine/engine.h"
#include "lft/engine/run_plan.h"
#include "lft/engine/sharded.h"

namespace lft::engine {

std::unique_ptr<Engine> create_sharded(const EngineContext& ctx);
MemoryEstimate estimate_sharded_engine(const RunPlan& run);

}  // namespace lft::engine
