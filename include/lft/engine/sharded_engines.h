// The `distributed` values served by ShardedEngine (sharded.h): each reads its own options and
// decides a ShardingPlan, or answers with the ddp engine where the algorithm is all-reduce
// (fsdp NO_SHARD, ZeRO stage 0).
#pragma once

#include <memory>

#include "lft/engine/engine.h"

namespace lft::engine {

// fsdp2: [dist_config] mixed_precision, reshard_after_forward, offload_params, pin_memory.
std::unique_ptr<Engine> create_fsdp2(const EngineContext& ctx);
// fsdp: [dist_config] sharding_strategy, mixed_precision.
std::unique_ptr<Engine> create_fsdp(const EngineContext& ctx);
// deepspeed: the JSON file of key `deepspeed` (ZeRO stage, bf16, offload, ...).
std::unique_ptr<Engine> create_deepspeed(const EngineContext& ctx);

}  // namespace lft::engine
