#include "lft/engine/mesh_plan.h"

#include <algorithm>

namespace lft::engine {
namespace {

std::string key_of(int d) { return std::string("mesh.") + mesh_dim_name(static_cast<MeshDim>(d)); }

[[noreturn]] void fail(const std::string& what, const std::string& hint) {
  throw config::ConfigError("config error: " + what + "\n  " + hint);
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
