#include "lft/plan/layout.h"

#include <algorithm>

namespace lft::plan {
namespace {

using engine::PipelineScheduleKind;
using Preset = engine::EnginePreset;

// Ascending.
std::vector<std::int64_t> divisors(std::int64_t n) {
  std::vector<std::int64_t> out;
  for (std::int64_t d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

bool wanted(const LayoutSpace& s, engine::EnginePreset engine) {
  return s.engines.empty() || std::find(s.engines.begin(), s.engines.end(), engine) != s.engines.end();
}

// The engine variants a mesh allows; micro-batch, accumulation and checkpointing come later. The
// data-parallel engines shard (or replicate) over dp x cp; megatron all-reduces over dp_replicate x cp
// (the distributed optimizer shards over it) or shards over dp_shard x cp.
std::vector<Layout> engine_variants(const LayoutSpace& s, const MeshShape& mesh) {
  const int pp = mesh[MeshDim::PP], dpr = mesh[MeshDim::DPReplicate], tp = mesh[MeshDim::TP];
  const int shards = mesh[MeshDim::DPShard] * mesh[MeshDim::CP];
  auto make = [&](engine::EnginePreset engine, Algorithm algorithm) {
    Layout l;
    l.engine = engine;
    l.algorithm = algorithm;
    l.mesh = mesh;
    return l;
  };
  std::vector<Layout> out;
  if (s.world == 1) return {make(Preset::None, Algorithm::Single)};
  const bool data_parallel_only = pp == 1 && tp == 1;
  if (data_parallel_only && mesh[MeshDim::DPShard] == 1 && wanted(s, Preset::Ddp))
    out.push_back(make(Preset::Ddp, Algorithm::Replicated));
  if (data_parallel_only && shards > 1 && wanted(s, Preset::Fsdp2))
    for (const bool reshard : {true, false}) {
      Layout l = make(Preset::Fsdp2, Algorithm::FullyShardedData);
      l.reshard_after_forward = reshard;
      out.push_back(l);
    }
  // ZeRO-3 is fsdp2's algorithm on flat buffers: the planner leaves it to fsdp2.
  if (data_parallel_only && dpr == 1 && shards > 1 && wanted(s, Preset::DeepSpeed))
    for (const int stage : {1, 2}) {
      Layout l = make(Preset::DeepSpeed, stage == 1 ? Algorithm::ShardedOptimizer : Algorithm::ShardedGradients);
      l.zero_stage = stage;
      out.push_back(l);
    }
  if (pp <= s.layers && wanted(s, Preset::Megatron)) {
    // Sequence parallel and the distributed optimizer move the same bytes as their alternatives
    // and keep less in memory, so the planner always takes them where they apply. Over dp_shard
    // it weighs ZeRO-2 (whole parameters) against ZeRO-3 (gathered per layer).
    Layout l = make(Preset::Megatron, Algorithm::Megatron);
    l.sequence_parallel = tp > 1;
    std::vector<Layout> data_parallel;
    if (mesh[MeshDim::DPShard] == 1) {
      l.distributed_optimizer = dpr * mesh[MeshDim::CP] > 1;
      data_parallel.push_back(l);
    } else if (!data_parallel_only) {  // alone, megatron's ZeRO-2/3 are fsdp2's and deepspeed's: left to them
      for (const engine::DpSharding d : {engine::DpSharding::OptimGrads, engine::DpSharding::OptimGradsParams}) {
        l.dp_sharding = d;
        data_parallel.push_back(l);
      }
    }
    for (const Layout& d : data_parallel) {
      out.push_back(d);
      if (pp > 1)
        for (int v = 2; v <= 8; ++v)
          if (s.layers % (static_cast<std::int64_t>(pp) * v) == 0) {
            Layout interleaved = d;
            interleaved.schedule = PipelineScheduleKind::Interleaved1F1B;
            interleaved.virtual_stages = v;
            out.push_back(interleaved);
          }
    }
  }
  return out;
}

// Each engine variant, and with cp > 1 each as Ulysses and as ring attention; for a mixture of
// experts each (megatron's too) with every ep that divides dp x cp and the experts.
std::vector<Layout> variants(const LayoutSpace& s, const MeshShape& mesh) {
  std::vector<Layout> cp_modes;
  for (const Layout& l : engine_variants(s, mesh)) {
    cp_modes.push_back(l);
    if (mesh[MeshDim::CP] > 1) {
      Layout ring = l;
      ring.ring = true;
      cp_modes.push_back(ring);
    }
  }
  std::vector<Layout> out;
  const std::int64_t dp_cp = mesh.dp_size() * mesh[MeshDim::CP];
  for (const Layout& l : cp_modes) {
    out.push_back(l);
    if (s.experts == 0 || l.algorithm == Algorithm::Single) continue;
    for (const std::int64_t ep : divisors(dp_cp)) {
      if (ep == 1 || s.experts % ep != 0) continue;
      Layout e = l;
      e.mesh.ep = static_cast<int>(ep);
      out.push_back(e);
    }
  }
  return out;
}

// pp x dp_replicate x dp_shard x cp x tp = world, tp inside a node, cp only for long sequences.
std::vector<MeshShape> meshes(const LayoutSpace& s) {
  std::vector<MeshShape> out;
  for (const std::int64_t pp : divisors(s.world))
    for (const std::int64_t tp : divisors(s.world / pp)) {
      if (tp > s.devices_per_node) continue;
      for (const std::int64_t cp : divisors(s.world / pp / tp)) {
        if (cp > 1 && s.seq_len / cp < kMinContextChunk) break;
        for (const std::int64_t dpr : divisors(s.world / pp / tp / cp)) {
          MeshShape mesh;
          mesh[MeshDim::PP] = static_cast<int>(pp);
          mesh[MeshDim::TP] = static_cast<int>(tp);
          mesh[MeshDim::CP] = static_cast<int>(cp);
          mesh[MeshDim::DPReplicate] = static_cast<int>(dpr);
          mesh[MeshDim::DPShard] = static_cast<int>(s.world / pp / tp / cp / dpr);
          out.push_back(mesh);
        }
      }
    }
  return out;
}

// Megatron's schedules need m >= pp micro-batches, interleaved a multiple of pp.
bool schedule_accepts(const Layout& l, std::int64_t micro_batches) {
  const int pp = l.mesh[MeshDim::PP];
  if (l.algorithm != Algorithm::Megatron || pp == 1) return true;
  if (micro_batches < pp) return false;
  return l.schedule != PipelineScheduleKind::Interleaved1F1B || micro_batches % pp == 0;
}

std::string flag(bool on) { return on ? "true" : "false"; }

const char* cp_mode(const Layout& l) { return l.ring ? "ring" : "ulysses"; }

// The DeepSpeed JSON to paste for a ZeRO stage: the repository's examples.
std::string deepspeed_example(int stage) {
  if (stage == 1) return "inputs/plan/ds_z1_config.json";
  return "inputs/ds_z" + std::to_string(std::max(stage, 0)) + "_config.json";
}

}  // namespace

std::string Layout::engine_text() const {
  std::string out = algorithm_text();
  if (mesh[MeshDim::CP] > 1 && ring) out += " ring";
  if (mesh.ep > 1) out += " ep " + std::to_string(mesh.ep);
  return out;
}

std::string Layout::algorithm_text() const {
  switch (algorithm) {
    case Algorithm::ShardedOptimizer:
    case Algorithm::ShardedGradients:
      return "ZeRO-" + std::to_string(zero_stage);
    case Algorithm::FullyShardedData:
      if (engine == Preset::DeepSpeed) return "ZeRO-3";
      return engine::preset_name(engine) + std::string(reshard_after_forward ? "" : " no-reshard");
    case Algorithm::Megatron: {
      std::string out = engine::preset_name(Preset::Megatron);
      if (sequence_parallel) out += " sp";
      if (mesh[MeshDim::PP] > 1)
        out += schedule == PipelineScheduleKind::Interleaved1F1B
                   ? " interleaved v" + std::to_string(virtual_stages)
                   : std::string(" ") + engine::pipeline_schedule_name(schedule);
      if (distributed_optimizer) out += " dist-opt";
      if (dp_sharding == engine::DpSharding::OptimGrads) out += " ZeRO-2";
      if (dp_sharding == engine::DpSharding::OptimGradsParams) out += " ZeRO-3";
      return out;
    }
    default:
      return engine == Preset::DeepSpeed ? "ZeRO-0" : engine::preset_name(engine);
  }
}

std::string Layout::mesh_text() const {
  std::string out;
  for (int d = 0; d < kMeshDims; ++d) out += (d == 0 ? "" : "x") + std::to_string(mesh.sizes[d]);
  return out;
}

std::vector<Layout> enumerate_layouts(const LayoutSpace& space) {
  std::vector<Layout> out;
  for (const MeshShape& mesh : meshes(space)) {
    const std::int64_t dp = mesh.dp_size();
    if (space.global_batch % dp != 0) continue;  // the global batch must stay what it is
    const std::int64_t share = space.global_batch / dp;
    for (const Layout& variant : variants(space, mesh))
      for (const std::int64_t micro : divisors(share)) {
        if (micro > space.max_micro_batch) break;
        if (!schedule_accepts(variant, share / micro)) continue;
        for (const bool checkpointing : {false, true}) {
          Layout l = variant;
          l.micro_batch = micro;
          l.accumulation = share / micro;
          l.checkpointing = checkpointing;
          out.push_back(l);
        }
      }
  }
  return out;
}

std::vector<std::string> layout_overrides(const Layout& l, const std::string& deepspeed_json) {
  std::vector<std::string> out = {
      std::string("distributed=") + engine::preset_name(l.engine),
      "mesh.pp=" + std::to_string(l.mesh[MeshDim::PP]),
      "mesh.dp_replicate=" + std::to_string(l.mesh[MeshDim::DPReplicate]),
      "mesh.dp_shard=" + std::to_string(l.mesh[MeshDim::DPShard]),
      "mesh.cp=" + std::to_string(l.mesh[MeshDim::CP]),
      "mesh.tp=" + std::to_string(l.mesh[MeshDim::TP]),
      "per_device_train_batch_size=" + std::to_string(l.micro_batch),
      "gradient_accumulation_steps=" + std::to_string(l.accumulation),
      "gradient_checkpointing=" + flag(l.checkpointing),
  };
  if (l.mesh[MeshDim::CP] > 1) out.push_back(std::string("dist_config.cp_mode=") + cp_mode(l));
  if (l.mesh.ep > 1) out.push_back("mesh.ep=" + std::to_string(l.mesh.ep));
  if (l.engine == Preset::Fsdp2) out.push_back("dist_config.reshard_after_forward=" + flag(l.reshard_after_forward));
  if (l.engine == Preset::DeepSpeed) out.push_back("deepspeed=" + deepspeed_json);
  if (l.algorithm == Algorithm::Megatron) {
    out.push_back("dist_config.sequence_parallel=" + flag(l.sequence_parallel));
    out.push_back("dist_config.use_distributed_optimizer=" + flag(l.distributed_optimizer));
    out.push_back(std::string("dist_config.data_parallel_sharding_strategy=") + engine::dp_sharding_name(l.dp_sharding));
    out.push_back(std::string("dist_config.pipeline_schedule=") + engine::pipeline_schedule_name(l.schedule));
    out.push_back("dist_config.virtual_pipeline_model_parallel_size=" + std::to_string(l.virtual_stages));
  }
  return out;
}

std::string layout_config_lines(const Layout& l) {
  std::string out = std::string("distributed = \"") + engine::preset_name(l.engine) + "\"\n";
  if (l.engine == Preset::DeepSpeed) out += "deepspeed = \"" + deepspeed_example(l.zero_stage) + "\"\n";
  out += "per_device_train_batch_size = " + std::to_string(l.micro_batch) + "\n";
  out += "gradient_accumulation_steps = " + std::to_string(l.accumulation) + "\n";
  out += "gradient_checkpointing = " + flag(l.checkpointing) + "\n";
  out += "\n[mesh]\n";
  for (int d = 0; d < kMeshDims; ++d)
    out += std::string(mesh_dim_name(static_cast<MeshDim>(d))) + " = " + std::to_string(l.mesh.sizes[d]) + "\n";
  if (l.mesh.ep > 1) out += "ep = " + std::to_string(l.mesh.ep) + "\n";
  std::string dist;
  if (l.mesh[MeshDim::CP] > 1) dist += std::string("cp_mode = \"") + cp_mode(l) + "\"\n";
  if (l.engine == Preset::Fsdp2 && !l.reshard_after_forward) dist += "reshard_after_forward = false\n";
  if (l.algorithm == Algorithm::Megatron) {
    dist += "sequence_parallel = " + flag(l.sequence_parallel) + "\n";
    dist += std::string("pipeline_schedule = \"") + engine::pipeline_schedule_name(l.schedule) + "\"\n";
    dist += "virtual_pipeline_model_parallel_size = " + std::to_string(l.virtual_stages) + "\n";
    dist += "use_distributed_optimizer = " + flag(l.distributed_optimizer) + "\n";
    dist += std::string("data_parallel_sharding_strategy = \"") + engine::dp_sharding_name(l.dp_sharding) + "\"\n";
  }
  if (!dist.empty()) out += "\n[dist_config]\n" + dist;
  return out;
}

}  // namespace lft::plan
