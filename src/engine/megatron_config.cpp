// megatron's decoder: [dist_config]'s tensor, sequence and pipeline keys and its data-parallel
// strategy read into a MegatronPlan and checked against the model and the mesh.
#include <string>

#include "lft/engine/parallel_config.h"
#include "lft/engine/tensor_parallel.h"
#include "lft/model/moe.h"

namespace lft::engine {
namespace {

[[noreturn]] void fail(const std::string& what, const std::string& hint) {
  throw config::ConfigError("config error: " + what + "\n  " + hint);
}

std::string n(std::int64_t v) { return std::to_string(v); }

void check_tensor_parallel(const config::Config& cfg, const model::CausalLM& model, int tp) {
  const std::string where = cfg.is_set("mesh.tp") ? cfg.where("mesh.tp") : "[mesh] tp";
  // Nothing to split at tp 1; of a layer's experts the first stands for all (the planner checks
  // many layouts of models with thousands of experts).
  if (tp == 1) return;
  for (const auto& [name, tensor] : model::distinct_parameters(model)) {
    const model::TpSplit s = model.placement(name).tp;
    if (!s.split()) continue;
    if (s.even && s.groups % tp != 0 && !(s.replicable && tp % s.groups == 0))
      fail(where + " = " + n(tp) + ": the model's " + n(s.groups) + " " + s.what +
               (s.replicable ? " neither divide over " + n(tp) +
                                   " ranks nor replicate evenly (tp must divide them or be a multiple of them)"
                             : " do not divide over " + n(tp) + " tensor-parallel ranks"),
           "choose a tp that divides " + n(s.groups) + (s.replicable ? " or is a multiple of it" : ""));
    if (s.role == model::TpRole::RowParallel && tensor.dim() < 2)
      fail(where + " = " + n(tp) + ": " + name +
               " is the bias of a row-parallel layer, which every tensor-parallel rank would add; "
               "this build splits only bias-free row-parallel layers",
           "train this model with tp = 1");
  }
  if (cfg.boolean("dist_config.sequence_parallel") && cfg.integer("cutoff_len") % tp != 0)
    fail(cfg.where("dist_config.sequence_parallel") + ": sequence parallel splits each sequence of cutoff_len = " +
             n(cfg.integer("cutoff_len")) + " tokens over tp = " + n(tp) + " ranks, which does not divide it",
         "make cutoff_len a multiple of tp");
}

std::vector<std::pair<std::int64_t, std::int64_t>> split_layers(const config::Config& cfg, std::int64_t layers,
                                                                int stages) {
  const std::string first_key = "dist_config.decoder_first_pipeline_num_layers";
  const std::string last_key = "dist_config.decoder_last_pipeline_num_layers";
  std::vector<std::int64_t> count(static_cast<std::size_t>(stages), 0);
  std::int64_t left = layers;
  int lo = 0, hi = stages;  // the stages still to balance: [lo, hi)
  if (cfg.is_set(first_key)) {
    if (stages < 2) fail(cfg.where(first_key) + ": needs at least 2 pipeline stages", "remove it, or set [mesh] pp");
    count[0] = cfg.integer(first_key);
    left -= count[0];
    lo = 1;
  }
  if (cfg.is_set(last_key)) {
    if (stages < 2) fail(cfg.where(last_key) + ": needs at least 2 pipeline stages", "remove it, or set [mesh] pp");
    count[static_cast<std::size_t>(stages - 1)] = cfg.integer(last_key);
    left -= count[static_cast<std::size_t>(stages - 1)];
    hi = stages - 1;
  }
  const int middle = hi - lo;
  if (left < middle || (middle == 0 && left != 0))
    fail("the " + n(layers) + " decoder layers cannot fill " + n(stages) + " pipeline stages" +
             (lo > 0 || hi < stages ? " after the first/last stage counts given in [dist_config]" : ""),
         "every (virtual) stage needs at least one layer: lower pp or virtual_pipeline_model_parallel_size, "
         "or change decoder_first/last_pipeline_num_layers");
  for (int i = lo; i < hi; ++i) {
    // Balanced: the earlier stages take the remainder, one layer each.
    count[static_cast<std::size_t>(i)] = left / middle + ((i - lo) < left % middle ? 1 : 0);
  }
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  std::int64_t begin = 0;
  for (std::int64_t c : count) {
    out.emplace_back(begin, begin + c);
    begin += c;
  }
  return out;
}

void check_data_parallel(const config::Config& cfg, const MegatronPlan& p, const MeshShape& mesh) {
  const std::string key = "dist_config.data_parallel_sharding_strategy";
  if (p.distributed_optimizer && cfg.is_set(key) && cfg.string(key) != "no_shard" && cfg.string(key) != "optim")
    fail(cfg.where(key) + " = \"" + cfg.string(key) + "\" contradicts " +
             cfg.where("dist_config.use_distributed_optimizer") +
             " (use_distributed_optimizer shards the optimizer state only, over every data-parallel rank)",
         "remove use_distributed_optimizer, or the sharding strategy");
  const int shard = mesh[MeshDim::DPShard] * mesh[MeshDim::CP], replicas = mesh[MeshDim::DPReplicate];
  if (p.dp_sharding == DpSharding::NoShard || p.distributed_optimizer) {
    const std::string dp_shard = (cfg.is_set("mesh.dp_shard") ? cfg.where("mesh.dp_shard") : std::string("[mesh] dp_shard")) +
                                 " = " + n(mesh[MeshDim::DPShard]);
    if (mesh[MeshDim::DPShard] > 1 && p.distributed_optimizer)
      fail(dp_shard + ": use_distributed_optimizer shards over every data-parallel rank, "
               "which megatron keeps on dp_replicate",
           "set [mesh] dp_replicate instead of dp_shard, or data_parallel_sharding_strategy = \"optim\" (ZeRO-1 over "
           "dp_shard, HSDP with dp_replicate) instead of use_distributed_optimizer");
    if (mesh[MeshDim::DPShard] > 1)
      fail(dp_shard + ": megatron shards over dp_shard only with a data_parallel_sharding_strategy",
           "set dist_config.data_parallel_sharding_strategy (optim, optim_grads, optim_grads_params), or use "
           "dp_replicate for plain data parallelism");
    return;
  }
  if (shard == 1 && replicas > 1)
    fail(cfg.where(key) + " = \"" + cfg.string(key) + "\" shards over [mesh] dp_shard x cp, which is 1 here (dp_replicate = " +
             n(replicas) + " only replicates)",
         "set [mesh] dp_shard = " + n(replicas) + " and dp_replicate = 1, or dp_shard x dp_replicate for HSDP");
}

}  // namespace

DpSharding dp_sharding_of(const config::Config& cfg) {
  if (cfg.boolean("dist_config.use_distributed_optimizer")) return DpSharding::Optim;
  const std::string s = cfg.string("dist_config.data_parallel_sharding_strategy");
  for (const DpSharding d : {DpSharding::Optim, DpSharding::OptimGrads, DpSharding::OptimGradsParams})
    if (s == dp_sharding_name(d)) return d;
  return DpSharding::NoShard;
}

MeshDim megatron_fill_dim(const config::Config& cfg) {
  const bool shards = dp_sharding_of(cfg) != DpSharding::NoShard && !cfg.boolean("dist_config.use_distributed_optimizer");
  return shards ? MeshDim::DPShard : MeshDim::DPReplicate;
}

MegatronPlan make_megatron_plan(const config::Config& cfg, const model::CausalLM& lm, const MeshShape& mesh, bool nccl) {
  const model::ModelConfig& model = lm.config();
  MegatronPlan p;
  p.tp = mesh[MeshDim::TP];
  p.pp = mesh[MeshDim::PP];
  p.virtual_stages = static_cast<int>(cfg.integer("dist_config.virtual_pipeline_model_parallel_size"));
  p.sequence_parallel = cfg.boolean("dist_config.sequence_parallel") && p.tp > 1;
  p.distributed_optimizer = cfg.boolean("dist_config.use_distributed_optimizer");
  p.dp_sharding = dp_sharding_of(cfg);
  check_data_parallel(cfg, p, mesh);
  p.schedule = pipeline_schedule_kind(cfg.string("dist_config.pipeline_schedule"));
  p.micro_batches = cfg.integer("gradient_accumulation_steps");
  check_tensor_parallel(cfg, lm, p.tp);
  if (p.virtual_stages > 1 && p.schedule != PipelineScheduleKind::Interleaved1F1B)
    fail(cfg.where("dist_config.virtual_pipeline_model_parallel_size") + " = " + n(p.virtual_stages) +
             ": virtual stages need pipeline_schedule = \"interleaved_1f1b\"",
         "set dist_config.pipeline_schedule = \"interleaved_1f1b\", or remove the key");
  if (p.pp > 1) {
    const std::string problem =
        pipeline_schedule_problem(p.schedule, p.pp, p.micro_batches, p.virtual_stages, model.num_hidden_layers);
    if (!problem.empty())
      fail(cfg.where("dist_config.pipeline_schedule") + " with [mesh] pp = " + n(p.pp) + ": " + problem,
           "raise gradient_accumulation_steps, or change pp or the schedule");
  }
  if (p.virtual_stages > 1 && model.num_hidden_layers % (p.pp * p.virtual_stages) != 0)
    fail(cfg.where("dist_config.virtual_pipeline_model_parallel_size") + " = " + n(p.virtual_stages) + ": the " +
             n(model.num_hidden_layers) + " decoder layers do not divide into pp x virtual stages = " +
             n(p.pp) + " x " + n(p.virtual_stages) + " = " + n(p.pp * p.virtual_stages) + " equal model chunks",
         "choose virtual_pipeline_model_parallel_size so that pp x it divides num_hidden_layers");
  // The auxiliary loss's gradient in a layer needs every layer's routing counts (moe.h), which a
  // pipeline has on other stages only after the layer's stage has moved on.
  if (p.pp > 1 && model.moe.aux_loss())
    fail("[mesh] pp = " + n(p.pp) + ": the auxiliary load-balancing loss of a mixture of experts (" + model.model_type +
             " with output_router_logits) is not built for pipeline parallelism",
         "set moe_aux_loss_coef = 0 (or output_router_logits false in config.json), or pp = 1");
  p.stage_layers = split_layers(cfg, model.num_hidden_layers, p.pp * p.virtual_stages);
  // NCCL pairs the pipeline's sends and receives by posting order, not by tag: a schedule runs on
  // it only where each direction's order is proven the same on both sides.
  if (nccl && p.pp > 1) {
    const std::string problem = pipeline_message_order_problem(p.schedule, p.pp, p.micro_batches, p.virtual_stages);
    if (!problem.empty())
      fail(cfg.where("dist_config.pipeline_schedule") + " \"" + pipeline_schedule_name(p.schedule) + "\" with [mesh] pp = " +
               n(p.pp) + ": NCCL matches point-to-point messages by order and " + problem,
           "use another pipeline_schedule or gradient_accumulation_steps");
  }
  return p;
}

}  // namespace lft::engine
