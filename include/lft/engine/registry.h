// The engine registry: one explicit list (STYLE.md 1), so an engine cannot silently drop out of
// a static library. Each entry says what the engine needs; `lftrain --list-engines` prints it and
// the mesh planner (mesh_plan.h) enforces it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "lft/config/config.h"
#include "lft/engine/engine.h"
#include "lft/engine/run_plan.h"
#include "lft/mesh/device_mesh.h"

namespace lft::engine {

struct EngineInfo {
  std::string name;                 // the `distributed` value
  std::string summary;              // one line
  std::vector<MeshDim> mesh_dims;   // dims it can spread over (others must be 1)
  MeshDim fill_dim;                 // the dim that takes the world when [mesh] does not say
  int max_ranks = 0;                // 0: any
  std::string needs;                // e.g. "NCCL for GPUs; MPI for CPU tensors"
  std::unique_ptr<Engine> (*create)(const EngineContext& ctx);
  // Per-rank tensor memory of the run (memory_estimate.h); throws ConfigError like create.
  MemoryEstimate (*estimate_memory)(const config::Config& cfg, const RunPlan& plan);
  // Where the configuration moves the fill (megatron's sharding strategies fill dp_shard); null:
  // fill_dim.
  MeshDim (*fill_dim_for)(const config::Config& cfg) = nullptr;
};

// The engines this build has, in registry order.
const std::vector<EngineInfo>& registry();

// The engine `cfg` asks for. An engine name the schema knows but this build lacks is a
// ConfigError that names the key's location and lists the available engines.
const EngineInfo& engine_for(const config::Config& cfg);

// `lftrain --list-engines`.
std::string list_engines_text();

}  // namespace lft::engine
