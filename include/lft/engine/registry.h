// The engine registry: one explicit list (STYLE.md 1), so an engine cannot silently drop out of
// a static library. Each entry says what the engine needs; `lftrain --list-engines` prints it and
// the mesh planner (mesh_plan.h) enforces it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "lft/config/config.h"
#include "lft/engine/engine.h"
#include "lft/engine/parallel_plan.h"
#include "lft/engine/run_plan.h"
#include "lft/mesh/device_mesh.h"

namespace lft::engine {

struct EngineInfo {
  EnginePreset preset;              // its `distributed` value: name()
  std::string summary;              // one line
  std::vector<MeshDim> mesh_dims;   // dims it can spread over (others must be 1)
  MeshDim fill_dim;                 // the dim that takes the world when [mesh] does not say
  int max_ranks = 0;                // 0: any
  std::string needs;                // e.g. "NCCL for GPUs; MPI for CPU tensors"
  std::unique_ptr<Engine> (*create)(const EngineContext& ctx);
  // Per-rank tensor memory of the run (memory_estimate.h).
  MemoryEstimate (*estimate_memory)(const RunPlan& plan);
  // Where the configuration moves the fill (megatron's sharding strategies fill dp_shard; a
  // decoder, parallel_config.h); null: fill_dim.
  MeshDim (*fill_dim_for)(const config::Config& cfg) = nullptr;

  std::string name() const { return preset_name(preset); }
};

// The engines this build has, in registry order.
const std::vector<EngineInfo>& registry();

// The registry's entry of a preset (engine_for(cfg) in parallel_config.h reads `distributed`).
const EngineInfo& engine_info(EnginePreset preset);

// `lftrain --list-engines`.
std::string list_engines_text();

}  // namespace lft::engine
