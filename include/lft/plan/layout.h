// A layout: one way to run a config on a cluster (engine, mesh, micro-batch x accumulation,
// activation checkpointing and the engine's own switches), the layouts the planner tries, and
// the config lines that select one (docs/plan.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lft/engine/parallel_plan.h"
#include "lft/engine/dp_sharding.h"
#include "lft/engine/pipeline_schedule.h"
#include "lft/mesh/device_mesh.h"

namespace lft::plan {

// How a layout communicates, which is all the cost model needs to know of its engine.
enum class Algorithm {
  Single,            // none: one rank
  Replicated,        // ddp (and fsdp NO_SHARD, ZeRO-0): bucketed all-reduce of the gradients
  FullyShardedData,  // fsdp2 (and fsdp, ZeRO-3): parameters gathered per layer; HSDP over dp_replicate
  ShardedOptimizer,  // ZeRO-1: gradients reduce-scattered once per step
  ShardedGradients,  // ZeRO-2: gradients reduce-scattered per micro-batch
  Megatron,          // tensor (+ sequence) and pipeline parallel, data parallel on top (all-reduced or sharded)
};

struct Layout {
  engine::EnginePreset engine = engine::EnginePreset::Ddp;  // the `distributed` preset
  Algorithm algorithm = Algorithm::Replicated;
  int zero_stage = -1;  // deepspeed's ZeRO stage
  MeshShape mesh;
  std::int64_t micro_batch = 1;        // per_device_train_batch_size
  std::int64_t accumulation = 1;       // gradient_accumulation_steps (megatron: the pipeline's micro-batches)
  bool checkpointing = false;          // gradient_checkpointing
  bool reshard_after_forward = true;   // FullyShardedData
  bool sequence_parallel = false;      // Megatron, tp > 1
  bool distributed_optimizer = false;  // Megatron, dp_replicate x cp > 1: ZeRO-1 over every dp rank
  // Megatron, dp_shard > 1: what its data parallelism shards over dp_shard x cp (HSDP with dp_replicate)
  engine::DpSharding dp_sharding = engine::DpSharding::NoShard;
  bool ring = false;                   // cp > 1: ring attention (cp_mode = "ring"), else Ulysses
  engine::PipelineScheduleKind schedule = engine::PipelineScheduleKind::OneFOneB;
  int virtual_stages = 1;

  // "fsdp2" / "ZeRO-2" / "megatron sp, interleaved_1f1b v5, dist-opt" / "fsdp2 ring" / "fsdp2 ep 8"
  std::string engine_text() const;
  // "1x1x64x1x1" (pp x dp_replicate x dp_shard x cp x tp)
  std::string mesh_text() const;

 private:
  std::string algorithm_text() const;  // engine_text without the cp mode
};

// What the planner may choose from: the ranks, the batch to keep, the model's depth, the engines.
struct LayoutSpace {
  int world = 1;
  int devices_per_node = 1;          // tp stays inside a node
  std::int64_t global_batch = 1;     // sequences per step, kept by every layout
  std::int64_t layers = 1;           // decoder layers (pipeline stages and chunks need one each)
  std::int64_t seq_len = 1;          // cutoff_len: context parallelism is tried for long ones
  std::int64_t max_micro_batch = 8;  // largest per_device_train_batch_size tried
  std::vector<engine::EnginePreset> engines;  // among ddp, fsdp2, deepspeed, megatron; empty: all
  std::int64_t experts = 0;          // a mixture of experts' experts per layer: ep is tried (0: dense)
};

// Context parallelism is tried where each cp rank keeps at least this many tokens of a sequence:
// shorter chunks leave the attention exchanges latency-bound for no memory worth saving.
constexpr std::int64_t kMinContextChunk = 4096;

// Every layout of `space`: mesh factorizations with tp <= devices_per_node (and cp where
// seq_len / cp >= kMinContextChunk, each cp > 1 both as Ulysses and as ring), micro-batches that
// divide each data-parallel rank's share of the global batch, checkpointing off and on, and per
// engine its variants (fsdp2 with and without reshard_after_forward; ZeRO-1 and -2; megatron with
// sequence parallel when tp > 1, the distributed optimizer when dp_replicate x cp > 1, ZeRO-2 and
// ZeRO-3 (data_parallel_sharding_strategy) when dp_shard > 1, and for pp > 1 1f1b and
// interleaved_1f1b with each v in 2..8 that divides the layers). Not yet validated against the
// model: the planner asks the engines (resolve_run_plan) and drops what they refuse. With experts,
// each layout of the data-parallel engines also with every ep > 1 that divides dp x cp and the
// experts (megatron's tp / pp with ep are not enumerated yet).
std::vector<Layout> enumerate_layouts(const LayoutSpace& space);

// The command-line overrides that select `layout` over a config ("distributed=fsdp2",
// "mesh.dp_shard=64", ...). `deepspeed_json` is the JSON file a ZeRO layout names.
std::vector<std::string> layout_overrides(const Layout& layout, const std::string& deepspeed_json);

// The same as TOML lines to paste into a config: top-level keys, then [mesh] and [dist_config].
std::string layout_config_lines(const Layout& layout);

}  // namespace lft::plan
