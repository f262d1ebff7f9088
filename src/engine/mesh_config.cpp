#include "lft/engine/mesh_plan.h"

#include <algorithm>

namespace lft::engine {
namespace {

std::string key_of(int d) { return std::string("mesh.") + mesh_dim_name(static_cast<MeshDim>(d)); }

[[noreturn]] void fail(const std::string& what, const std::string& hint) {
  throw config::ConfigError("config error: " + what + "\n  " + hint);
}

// [mesh] ep: the expert-parallel ranks, borrowed from dp x cp (device_mesh.h).
int expert_parallel_size(const config::Config& cfg, const EngineInfo& engine, const MeshShape& shape) {
  const int ep = static_cast<int>(cfg.integer("mesh.ep"));
  if (ep == 1) return 1;
  const std::string where = cfg.where("mesh.ep") + " = " + std::to_string(ep);
  if (engine.preset == EnginePreset::None)
    fail(where + ": engine 'none' trains on one rank, which holds every expert",
         "use distributed = \"fsdp2\" (or ddp, fsdp, deepspeed, megatron) with mesh.ep, or set mesh.ep = 1");
  const int dp_cp = shape.sizes[static_cast<int>(MeshDim::DPReplicate)] * shape.sizes[static_cast<int>(MeshDim::DPShard)] *
                    shape.sizes[static_cast<int>(MeshDim::CP)];
  if (dp_cp < 1 || dp_cp % ep != 0)
    fail(where + ": expert parallelism borrows its ranks from the data- and context-parallel ones, and ep does not "
             "divide dp_replicate x dp_shard x cp = " + std::to_string(dp_cp) + " (" + shape.str() + ")",
         "choose an ep that divides the data-parallel ranks (x cp), e.g. ep = dp_shard");
  return ep;
}

}  // namespace

MeshShape plan_mesh(const config::Config& cfg, const EngineInfo& engine, int world_size) {
  if (engine.max_ranks > 0 && world_size > engine.max_ranks)
    fail(cfg.where("distributed") + ": engine '" + engine.name() + "' runs on " +
             std::to_string(engine.max_ranks) + " rank(s), this job has " +
             std::to_string(world_size),
         "choose a multi-rank engine (distributed = \"ddp\", ...) or start one rank");

  MeshShape shape;
  int fill = -1;
  for (int d = 0; d < kMeshDims; ++d) {
    const std::string key = key_of(d);
    if (!cfg.is_set(key)) continue;
    const int value = static_cast<int>(cfg.integer(key));
    const bool used = std::find(engine.mesh_dims.begin(), engine.mesh_dims.end(),
                                static_cast<MeshDim>(d)) != engine.mesh_dims.end();
    if (value != 1 && !used)
      fail(cfg.where(key) + " = " + std::to_string(value) + ": engine '" + engine.name() +
               "' does not use the " + mesh_dim_name(static_cast<MeshDim>(d)) + " dim",
           "set " + key + " = 1, or pick an engine that uses it (`lftrain --list-engines`)");
    shape.sizes[d] = value;
    if (value == -1) fill = d;
  }
  const int default_fill = static_cast<int>(engine.fill_dim_for ? engine.fill_dim_for(cfg) : engine.fill_dim);
  if (fill < 0 && !cfg.is_set(key_of(default_fill)) && !engine.mesh_dims.empty()) {
    fill = default_fill;
    shape.sizes[fill] = -1;
  }
  if (fill >= 0) {
    int others = 1;
    std::string fixed;  // the dims that multiply to `others`, each where the file sets it
    for (int d = 0; d < kMeshDims; ++d) {
      if (d == fill) continue;
      others *= shape.sizes[d];
      if (shape.sizes[d] != 1)
        fixed += (fixed.empty() ? "" : ", ") + (cfg.is_set(key_of(d)) ? cfg.where(key_of(d)) : key_of(d)) + " = " +
                 std::to_string(shape.sizes[d]);
    }
    if (world_size % others != 0)
      fail((cfg.is_set(key_of(fill)) ? cfg.where(key_of(fill)) : "key '" + key_of(fill) + "'") +
               " fills the mesh, but the other dims multiply to " + std::to_string(others) + " (" + fixed +
               "), which does not divide the job's " + std::to_string(world_size) + " ranks",
           "make the fixed [mesh] dims divide the rank count");
    shape.sizes[fill] = world_size / others;
  }
  if (cfg.is_set("mesh.ep")) shape.ep = expert_parallel_size(cfg, engine, shape);
  if (shape.world_size() != world_size)
    fail("the mesh " + shape.str() + " has " + std::to_string(shape.world_size()) +
             " ranks but the job has " + std::to_string(world_size) + " (" + cfg.source_name() +
             ", table [mesh])",
         "make [mesh] multiply to " + std::to_string(world_size) +
             ", set one dim to -1 to fill, or start " + std::to_string(shape.world_size()) +
             " ranks (mpirun -np " + std::to_string(shape.world_size()) + ")");
  return shape;
}

}  // namespace lft::engine
