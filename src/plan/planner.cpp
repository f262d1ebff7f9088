#include "lft/plan/planner.h"

#include <c10/core/TensorOptions.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <tuple>

#include "lft/engine/mesh_plan.h"
#include "lft/engine/parallel_config.h"
#include "lft/engine/registry.h"
#include "lft/engine/run_plan.h"
#include "planner_config.h"

namespace lft::plan {
namespace {

// DeepSpeed JSON files for the ZeRO layouts, every value "auto" (filled from the TOML): the
// deepspeed engine reads its stage from a file. Written in a private temporary folder that is
// removed with this object.
class ZeroJsonFiles {
 public:
  ZeroJsonFiles() {
    std::string pattern = "/tmp/lft_plan_XXXXXX";
    if (::mkdtemp(pattern.data()) != nullptr) dir_ = pattern;
  }
  ~ZeroJsonFiles() {
    for (const std::string& p : written_) ::unlink(p.c_str());
    if (!dir_.empty()) ::rmdir(dir_.c_str());
  }
  ZeroJsonFiles(const ZeroJsonFiles&) = delete;
  ZeroJsonFiles& operator=(const ZeroJsonFiles&) = delete;

  // The file of `stage`; "" without a temporary folder, which the engine then refuses by name.
  std::string path(int stage) {
    if (dir_.empty()) return "";
    const std::string p = dir_ + "/ds_z" + std::to_string(stage) + "_config.json";
    if (std::find(written_.begin(), written_.end(), p) == written_.end()) {
      std::ofstream(p) << "{\"train_batch_size\": \"auto\", \"train_micro_batch_size_per_gpu\": \"auto\",\n"
                          " \"gradient_accumulation_steps\": \"auto\", \"gradient_clipping\": \"auto\",\n"
                          " \"fp16\": {\"enabled\": \"auto\"}, \"bf16\": {\"enabled\": \"auto\"},\n"
                          " \"zero_optimization\": {\"stage\": "
                       << stage << "}}\n";
      written_.push_back(p);
    }
    return p;
  }

 private:
  std::string dir_;
  std::vector<std::string> written_;
};

config::Config parse_with(const PlanRequest& r, const std::vector<std::string>& layout_overrides) {
  std::vector<std::string> all = r.overrides;
  all.insert(all.end(), layout_overrides.begin(), layout_overrides.end());
  return config::parse_config(r.config_text, r.config_name, all);
}


void add_shares(StepInput& in, const MegatronShares& shares) {
  in.stage_layers = shares.stage_layers;
  in.stage_box = shares.stage_box;
}

// The layout a config asks for, as the cost model reads it: its resolved parallel plan.
Layout config_layout(const engine::RunPlan& plan) {
  using engine::EnginePreset;
  const engine::ParallelPlan& parallel = plan.parallel;
  Layout l;
  l.engine = parallel.preset;
  l.mesh = plan.mesh;
  l.micro_batch = plan.micro_batch;
  l.accumulation = plan.accumulation;
  l.checkpointing = plan.gradient_checkpointing;
  l.ring = parallel.cp_ring;
  if (l.engine == EnginePreset::None) {
    l.algorithm = Algorithm::Single;
  } else if (l.engine == EnginePreset::Fsdp2 || l.engine == EnginePreset::Fsdp) {
    l.algorithm = parallel.sharded ? Algorithm::FullyShardedData : Algorithm::Replicated;  // fsdp NO_SHARD
    if (parallel.sharded) l.reshard_after_forward = parallel.sharded->reshard_after_forward;
  } else if (l.engine == EnginePreset::DeepSpeed) {
    l.zero_stage = plan.deepspeed ? plan.deepspeed->zero_stage : 0;
    const Algorithm by_stage[] = {Algorithm::Replicated, Algorithm::ShardedOptimizer, Algorithm::ShardedGradients,
                                  Algorithm::FullyShardedData};
    l.algorithm = by_stage[std::clamp(l.zero_stage, 0, 3)];
  } else if (l.engine == EnginePreset::Megatron) {
    const engine::MegatronPlan& m = *parallel.megatron;
    l.algorithm = Algorithm::Megatron;
    l.sequence_parallel = m.sequence_parallel;
    l.distributed_optimizer = m.distributed_optimizer;
    if (!l.distributed_optimizer) l.dp_sharding = m.dp_sharding;
    l.schedule = m.schedule;
    l.virtual_stages = m.virtual_stages;
  } else {
    l.algorithm = Algorithm::Replicated;  // ddp
  }
  return l;
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

void refuse(EngineVerdict& v, const config::ConfigError& e) {
  ++v.refused;
  if (v.first_refusal.empty()) v.first_refusal = first_line(e.what());
}

void describe_model(const config::Config& cfg, const model::CausalLM& m, PlanResult& out) {
  out.model_summary = m.config().summary();
  out.model = model_shape(m);
  out.seq_len = config_settings(cfg).seq_len;
}

}  // namespace

ModelShape model_shape(const model::CausalLM& m) {
  const model::ModelConfig& c = m.config();
  ModelShape s;
  s.layers = c.num_hidden_layers;
  s.hidden = c.hidden_size;
  s.vocab = c.vocab_size;
  s.attention_width = c.num_attention_heads * c.head_dim();
  s.heads = c.num_attention_heads;
  s.kv_heads = c.num_key_value_heads;
  s.head_dim = c.head_dim();
  s.head_trained = false;
  s.tied_embedding = c.tie_word_embeddings;
  s.embedding_trained = m.model->embed_tokens->weight.requires_grad();
  double matmul = 0, matmul_trained = 0;
  for (const auto& item : m.named_parameters()) {
    const at::Tensor& t = item.value();
    const double n = static_cast<double>(t.numel());
    const bool trains = t.requires_grad();
    s.params += n;
    if (trains) s.trained += n;
    const model::ParameterPlacement where = m.placement(item.key());
    if (!m.is_layer_unit(where.units.front())) {
      s.root_params += n;
      if (trains) s.root_trained += n;
    } else if (t.dim() >= 2) {
      if (item.key().find(".experts.") != std::string::npos) {
        s.expert_params += n;
        if (trains) s.expert_trained += n;
      }
      // A mixture of experts holds every expert (params) but a token runs k of them (compute).
      const double runs = item.key().find(".experts.") == std::string::npos
                              ? 1.0
                              : static_cast<double>(c.moe.experts_per_token) / static_cast<double>(c.moe.num_experts);
      matmul += n * runs;
      if (trains) matmul_trained += n * runs;
    }
    const bool in_head = std::find(where.units.begin(), where.units.end(), m.head_unit()) != where.units.end();
    if (in_head && t.dim() == 2 && trains) s.head_trained = true;
  }
  s.experts = c.moe.num_experts;
  s.experts_per_token = c.moe.experts_per_token;
  for (std::int64_t layer = 0; layer < c.num_hidden_layers; ++layer)
    if (c.moe.num_experts > 0 && c.moe.routes(layer)) ++s.moe_layers;
  const double layers = static_cast<double>(std::max<std::int64_t>(1, s.layers));
  s.layer_matmul_params = matmul / layers;
  s.layer_matmul_trained = matmul_trained / layers;
  return s;
}

MegatronShares megatron_shares(const model::CausalLM& m, const engine::MegatronPlan& plan) {
  MegatronShares out;
  out.stage_layers.assign(static_cast<std::size_t>(plan.pp), 0);
  for (std::size_t g = 0; g < plan.stage_layers.size(); ++g)
    out.stage_layers[g % static_cast<std::size_t>(plan.pp)] += plan.stage_layers[g].second - plan.stage_layers[g].first;
  // As estimate_megatron counts them: tensor-parallel rank 0's box of every parameter a stage runs.
  std::vector<ModelShape> boxes(static_cast<std::size_t>(plan.pp));
  for (std::size_t stage = 0; stage < boxes.size(); ++stage) boxes[stage].layers = out.stage_layers[stage];
  for (const auto& item : m.named_parameters()) {
    const at::Tensor& t = item.value();
    const model::ParameterPlacement placement = m.placement(item.key());
    const engine::TpSlice slice = engine::tp_slice(placement.tp, plan.tp, 0);
    double elements = static_cast<double>(t.numel());
    if (slice.dim >= 0) elements = elements / static_cast<double>(t.size(slice.dim)) * static_cast<double>(slice.count);
    const bool root = !m.is_layer_unit(placement.units.front());
    std::vector<bool> counted(static_cast<std::size_t>(plan.pp), false);
    for (const std::int64_t unit : placement.units) {
      const auto stage = static_cast<std::size_t>(engine::stage_of_unit(plan, m, unit));
      if (counted[stage]) continue;
      counted[stage] = true;
      ModelShape& box = boxes[stage];
      box.params += elements;
      if (root) box.root_params += elements;
      if (!t.requires_grad()) continue;
      box.trained += elements;
      if (root) box.root_trained += elements;
    }
  }
  out.stage_box = *std::max_element(boxes.begin(), boxes.end(),
                                     [](const ModelShape& a, const ModelShape& b) { return a.trained < b.trained; });
  return out;
}

PlanResult make_plan(const PlanRequest& r) {
  const config::Config base = config::parse_config(r.config_text, r.config_name, r.overrides);
  const std::shared_ptr<model::CausalLM> model = meta_model(base);
  PlanResult result;
  describe_model(base, *model, result);
  result.global_batch = config_global_batch(base, r.cluster.world_size());

  LayoutSpace space;
  space.world = r.cluster.world_size();
  space.devices_per_node = r.cluster.devices_per_node;
  space.global_batch = result.global_batch;
  space.layers = result.model.layers;
  space.seq_len = result.seq_len;
  space.engines = r.engines;
  space.experts = result.model.experts;

  ZeroJsonFiles zero_files;
  std::map<engine::EnginePreset, EngineVerdict> verdicts;
  std::map<std::tuple<int, int, int>, MegatronShares> shares;  // by (tp, pp, v)
  std::vector<Candidate> predicted;
  for (const Layout& layout : enumerate_layouts(space)) {
    Candidate c;
    c.layout = layout;
    c.overrides = layout_overrides(layout, layout.engine == engine::EnginePreset::DeepSpeed ? zero_files.path(layout.zero_stage) : "");
    EngineVerdict& verdict = verdicts[layout.engine];
    verdict.engine = layout.engine;
    StepInput in = step_input(r, result.model, base, layout);
    if (layout.algorithm == Algorithm::Megatron) {
      // The engine's own split (and its refusals: heads tp does not divide, too few micro-batches).
      try {
        const engine::MegatronPlan plan = engine::make_megatron_plan(parse_with(r, c.overrides), *model, layout.mesh);
        const auto key = std::make_tuple(plan.tp, plan.pp, plan.virtual_stages);
        auto found = shares.find(key);
        if (found == shares.end()) found = shares.emplace(key, megatron_shares(*model, plan)).first;
        add_shares(in, found->second);
      } catch (const config::ConfigError& e) {
        refuse(verdict, e);
        continue;
      }
    }
    c.prediction = predict_step(in);
    ++verdict.predicted;
    predicted.push_back(std::move(c));
  }
  std::stable_sort(predicted.begin(), predicted.end(), [](const Candidate& a, const Candidate& b) {
    return a.prediction.tokens_per_s > b.prediction.tokens_per_s;
  });

  // Sizing takes the engines' estimate (a meta-device model each time): only as far down the
  // ranking as it takes to find `top` layouts that fit.
  const double usable = r.cluster.usable_memory_bytes();
  for (Candidate& c : predicted) {
    if (static_cast<int>(result.ranked.size()) >= r.top) break;
    try {
      const engine::RunPlan plan =
          engine::resolve_run_plan(parse_with(r, c.overrides), c.layout.mesh, false, r.cluster.cpus());
      c.prediction.memory_bytes = plan.memory.device_total();
      c.memory_report = plan.memory.str();
    } catch (const config::ConfigError& e) {
      refuse(verdicts[c.layout.engine], e);
      continue;
    }
    ++result.sized;
    c.fits = c.prediction.memory_bytes <= usable;
    if (c.fits)
      result.ranked.push_back(c);
    else if (!result.smallest || c.prediction.memory_bytes < result.smallest->prediction.memory_bytes)
      result.smallest = c;
  }
  if (!result.ranked.empty()) result.smallest.reset();
  for (const auto& [preset, verdict] : verdicts) result.engines.push_back(verdict);  // in the presets' order
  return result;
}

Candidate predict_config_layout(const PlanRequest& r, PlanResult& context) {
  const config::Config cfg = config::parse_config(r.config_text, r.config_name, r.overrides);
  const std::shared_ptr<model::CausalLM> model = meta_model(cfg);
  describe_model(cfg, *model, context);
  const MeshShape mesh = engine::plan_mesh(cfg, engine::engine_for(cfg), r.cluster.world_size());
  const engine::RunPlan plan = engine::resolve_run_plan(cfg, mesh, false, r.cluster.cpus());
  context.global_batch = plan.global_batch;

  Candidate c;
  c.layout = config_layout(plan);
  StepInput in = step_input(r, context.model, cfg, c.layout);
  if (c.layout.algorithm == Algorithm::Megatron)
    add_shares(in, megatron_shares(*model, engine::make_megatron_plan(cfg, *model, mesh)));
  in.memory_bytes = plan.memory.device_total();
  c.prediction = predict_step(in);
  c.memory_report = plan.memory.str();
  c.fits = in.memory_bytes <= r.cluster.usable_memory_bytes();
  return c;
}

}  // namespace lft::plan
