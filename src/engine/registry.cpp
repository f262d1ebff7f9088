#include "lft/engine/registry.h"

#include <algorithm>
#include <stdexcept>

#include "lft/engine/ddp.h"
#include "lft/engine/megatron.h"
#include "lft/engine/memory_estimate.h"
#include "lft/engine/none.h"
#include "lft/engine/parallel_config.h"
#include "lft/engine/sharded_engines.h"

namespace lft::engine {
namespace {

template <class E>
std::unique_ptr<Engine> make(const EngineContext& ctx) {
  return std::make_unique<E>(ctx);
}

MemoryEstimate whole_model(const RunPlan& plan) { return estimate_replicated(plan, false); }
MemoryEstimate whole_model_with_buckets(const RunPlan& plan) { return estimate_replicated(plan, true); }

}  // namespace

const std::vector<EngineInfo>& registry() {
  static const std::vector<EngineInfo> engines = {
      // One line per engine: its `distributed` name, what it does, its mesh dims, and its factory.
      // none, ddp and megatron are classes of their own (src/engine/<name>.cpp); fsdp2, fsdp and
      // deepspeed are plans of the ShardedEngine (sharded.cpp), made in sharded_engines.cpp, and
      // fsdp NO_SHARD / ZeRO-0 are the DdpEngine under their own name.
      {EnginePreset::None, "one rank, no communication", {}, MeshDim::DPReplicate, 1, "nothing",
       make<NoneEngine>, whole_model},
      {EnginePreset::Ddp, "data parallel: every rank holds the whole model, gradients are all-reduced",
       {MeshDim::DPReplicate, MeshDim::CP}, MeshDim::DPReplicate, 0, "MPI (CPU) or NCCL (GPU)", make<DdpEngine>,
       whole_model_with_buckets},
      {EnginePreset::Fsdp2, "per-parameter sharding (FSDP2); HSDP with [mesh] dp_replicate > 1",
       {MeshDim::DPReplicate, MeshDim::DPShard, MeshDim::CP}, MeshDim::DPShard, 0, "MPI (CPU) or NCCL (GPU)",
       create_sharded, estimate_sharded_engine},
      {EnginePreset::Fsdp, "flat-buffer sharding (FSDP v1), dist_config.sharding_strategy",
       {MeshDim::DPReplicate, MeshDim::DPShard, MeshDim::CP}, MeshDim::DPShard, 0, "MPI (CPU) or NCCL (GPU)",
       create_sharded, estimate_sharded_engine},
      {EnginePreset::DeepSpeed, "ZeRO stages 0-3 from a DeepSpeed JSON file (key `deepspeed`)",
       {MeshDim::DPShard, MeshDim::CP}, MeshDim::DPShard, 0, "MPI (CPU) or NCCL (GPU)", create_sharded,
       estimate_sharded_engine},
      {EnginePreset::Megatron, "tensor (+ sequence) and pipeline parallel (1f1b, interleaved, gpipe) with data parallel on top",
       {MeshDim::PP, MeshDim::DPReplicate, MeshDim::DPShard, MeshDim::CP, MeshDim::TP}, MeshDim::DPReplicate, 0,
       "MPI (CPU) or NCCL (GPU)", create_megatron, estimate_megatron, megatron_fill_dim},
  };
  return engines;
}

const EngineInfo& engine_info(EnginePreset preset) {
  for (const auto& e : registry())
    if (e.preset == preset) return e;
  throw std::logic_error(std::string("engine preset ") + preset_name(preset) + " is not in the registry");
}

const char* preset_name(EnginePreset preset) {
  switch (preset) {
    case EnginePreset::None: return "none";
    case EnginePreset::Ddp: return "ddp";
    case EnginePreset::Fsdp2: return "fsdp2";
    case EnginePreset::Fsdp: return "fsdp";
    case EnginePreset::DeepSpeed: return "deepspeed";
    case EnginePreset::Megatron: return "megatron";
  }
  return "none";
}

std::string list_engines_text() {
  std::string out = "engines in this build (config key `distributed`):\n";
  for (const auto& e : registry()) {
    std::string dims;
    for (MeshDim d : e.mesh_dims) dims += (dims.empty() ? "" : ", ") + std::string(mesh_dim_name(d));
    const config::EngineCapabilities& can = config::capabilities_of(e.name());
    std::string supports;
    for (const auto& [has, what] : {std::pair{can.float8, "fp8"}, {can.float8_all_gather, "float8 all-gather"},
                                    {can.offload, "offload"}, {can.deepspeed_config, "DeepSpeed JSON"},
                                    {can.sequence_parallel, "sequence parallel"}})
      if (has) supports += (supports.empty() ? "" : ", ") + std::string(what);
    out += "  " + e.name() + std::string(std::max<size_t>(1, 10 - e.name().size()), ' ') + e.summary +
           "\n" + std::string(12, ' ') + "mesh dims: " + (dims.empty() ? "none (one rank)" : dims) +
           "; needs: " + e.needs + (supports.empty() ? "" : "; supports: " + supports) + "\n";
  }
  std::string missing;
  for (const auto& name : config::engine_names()) {
    const bool built = std::any_of(registry().begin(), registry().end(),
                                   [&](const EngineInfo& e) { return e.name() == name; });
    if (!built) missing += (missing.empty() ? "" : ", ") + name;
  }
  if (!missing.empty()) out += "not in this build yet: " + missing + "\n";
  return out;
}

}  // namespace lft::engine
