// The parallel layout of a run, resolved once from the configuration (parallel_config.cpp, the
// decoder) and carried in the RunPlan: which engine preset `distributed` names, how data
// parallelism treats what the tensor and pipeline layout leave on a rank (replicated or sharded,
// and the sharded policy's data), megatron's tensor / sequence / pipeline plan, and context
// parallelism's mode. The engines, the memory estimate and the trainer read this, never the
// configuration's keys (docs/architecture.md, "The parallel plan").
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "lft/engine/megatron_plan.h"
#include "lft/engine/sharded_data_parallel.h"

namespace lft::engine {

// The values of `distributed`: each a preset of the plan below.
enum class EnginePreset { None, Ddp, Fsdp2, Fsdp, DeepSpeed, Megatron };

// "none", "ddp", "fsdp2", "fsdp", "deepspeed", "megatron".
const char* preset_name(EnginePreset preset);

struct ParallelPlan {
  EnginePreset preset = EnginePreset::None;
  // Data parallelism over the data-parallel ranks: nullopt replicates (every rank holds what it
  // trains; gradients all-reduced in buckets of bucket_bytes: ddp, fsdp NO_SHARD, ZeRO-0, megatron
  // without a sharding strategy); else the sharded component's policy (ShardingPlan).
  std::optional<ShardingPlan> sharded;
  double bucket_bytes = 25.0 * 1024.0 * 1024.0;  // ddp_bucket_cap_mb
  // preset megatron: tensor / sequence / pipeline parallel and its data-parallel strategy, checked
  // against the model and the mesh.
  std::optional<MegatronPlan> megatron;
  // Context parallelism (mesh.cp > 1): ring attention (K/V passed round) instead of Ulysses
  // (all-to-all of heads); dist_config.cp_mode.
  bool cp_ring = false;
  // Lines for the start-up log that the configuration's files and options bring (the DeepSpeed
  // file's notes, what offload does).
  std::vector<std::string> notes;

  const char* engine() const { return preset_name(preset); }
};

}  // namespace lft::engine
