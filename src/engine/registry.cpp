#include "lft/engine/registry.h"

#include <algorithm>

#include "lft/engine/ddp.h"
#include "lft/engine/megatron.h"
#include "lft/engine/megatron_plan.h"
#include "lft/engine/memory_estimate.h"
#include "lft/engine/none.h"
#include "lft/engine/sharded_engines.h"

namespace lft::engine {
namespace {

template <class E>
std::unique_ptr<Engine> make(const EngineContext& ctx) {
  return std::make_unique<E>(ctx);
}

MemoryEstimate whole_model(const config::Config&, const RunPlan& plan) { return estimate_replicated(plan, false); }
MemoryEstimate whole_model_with_buckets(const config::Config&, const RunPlan& plan) {
  return estimate_replicated(plan, true);
}

// megatron's sharding strategies put the data-parallel ranks on dp_shard by default; the
// all-reduce and use_distributed_optimizer on dp_replicate.
MeshDim megatron_fill(const config::Config& cfg) {
  const bool shards = dp_sharding_of(cfg) != DpSharding::NoShard && !cfg.boolean("dist_config.use_distributed_optimizer");
  return shards ? MeshDim::DPShard : MeshDim::DPReplicate;
}

}  // namespace

const std::vector<EngineInfo>& registry() {
  static const std::vector<EngineInfo> engines = {
      // One line per engine: its `distributed` name, what it does, its mesh dims, and its factory.
      // none, ddp and megatron are classes of their own (src/engine/<name>.cpp); fsdp2, fsdp and
      // deepspeed are plans of the ShardedEngine (sharded.cpp), made in sharded_engines.cpp, and
      // fsdp NO_SHARD / ZeRO-0 are the DdpEngine under their own name.
      {"none", "one rank, no communication", {}, MeshDim::DPReplicate, 1, "nothing",
       make<NoneEngine>, whole_model},
      {"ddp", "data parallel: every rank holds the whole model, gradients are all-reduced",
       {MeshDim::DPReplicate, MeshDim::CP}, MeshDim::DPReplicate, 0, "MPI (CPU) or NCCL (GPU)", make<DdpEngine>,
       whole_model_with_buckets},
      {"fsdp2", "per-parameter sharding (FSDP2); HSDP with [mesh] dp_replicate > 1",
       {MeshDim::DPReplicate, MeshDim::DPShard, MeshDim::CP}, MeshDim::DPShard, 0, "MPI (CPU) or NCCL (GPU)",
       create_sharded, estimate_sharded_engine},
      {"fsdp", "flat-buffer sharding (FSDP v1), dist_config.sharding_strategy",
       {MeshDim::DPReplicate, MeshDim::DPShard, MeshDim::CP}, MeshDim::DPShard, 0, "MPI (CPU) or NCCL (GPU)",
       create_sharded, estimate_sharded_engine},
      {"deepspeed", "ZeRO stages 0-3 from a DeepSpeed JSON file (key `deepspeed`)",
       {MeshDim::DPShard, MeshDim::CP}, MeshDim::DPShard, 0, "MPI (CPU) or NCCL (GPU)", create_sharded,
       estimate_sharded_engine},
      {"megatron", "tensor (+ sequence) and pipeline parallel (1f1b, interleaved, gpipe) with data parallel on top",
       {MeshDim::PP, MeshDim::DPReplicate, MeshDim::DPShard, MeshDim::CP, MeshDim::TP}, MeshDim::DPReplicate, 0,
       "MPI (CPU) or NCCL (GPU)", create_megatron, estimate_megatron, megatron_fill},
  };
  return engines;
}

const EngineInfo& engine_for(const config::Config& cfg) {
  const std::string& name = cfg.string("distributed");
  for (const auto& e : registry())
    if (e.name == name) return e;
  std::string available;
  for (const auto& e : registry()) available += (available.empty() ? "" : ", ") + e.name;
  throw config::ConfigError("config error: " + cfg.where("distributed") + ": engine '" + name +
                            "' is not available in this build of lftrain; available: " +
                            available + " (see `lftrain --list-engines`)");
}

std::string list_engines_text() {
  std::string out = "engines in this build (config key `distributed`):\n";
  for (const auto& e : registry()) {
    std::string dims;
    for (MeshDim d : e.mesh_dims) dims += (dims.empty() ? "" : ", ") + std::string(mesh_dim_name(d));
    const config::EngineCapabilities& can = config::capabilities_of(e.name);
    std::string supports;
    for (const auto& [has, what] : {std::pair{can.float8, "fp8"}, {can.float8_all_gather, "float8 all-gather"},
                                    {can.offload, "offload"}, {can.deepspeed_config, "DeepSpeed JSON"},
                                    {can.sequence_parallel, "sequence parallel"}})
      if (has) supports += (supports.empty() ? "" : ", ") + std::string(what);
    out += "  " + e.name + std::string(std::max<size_t>(1, 10 - e.name.size()), ' ') + e.summary +
           "\n" + std::string(12, ' ') + "mesh dims: " + (dims.empty() ? "none (one rank)" : dims) +
           "; needs: " + e.needs + (supports.empty() ? "" : "; supports: " + supports) + "\n";
  }
  std::string missing;
  for (const auto& name : config::engine_names()) {
    const bool built = std::any_of(registry().begin(), registry().end(),
                                   [&](const EngineInfo& e) { return e.name == name; });
    if (!built) missing += (missing.empty() ? "" : ", ") + name;
  }
  if (!missing.empty()) out += "not in this build yet: " + missing + "\n";
  return out;
}

}  // namespace lft::engine
