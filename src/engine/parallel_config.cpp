// The parallel plan's decoder: `distributed` as a preset, the sharded engines' [dist_config] keys
// and the DeepSpeed file as a data-parallel policy, megatron's plan (megatron_config.cpp),
// ddp_bucket_cap_mb and context parallelism's mode, checked against one another, the model and
// the mesh.
#include "lft/engine/parallel_config.h"

#include <string>

#include "lft/config/deepspeed.h"
#include "lft/engine/dp_sharding.h"

namespace lft::engine {
namespace {

[[noreturn]] void fail(const std::string& what, const std::string& hint) {
  throw config::ConfigError("config error: " + what + "\n  hint: " + hint);
}

// The dtype the top-level bf16 / fp16 keys ask for, and its dist_config spelling.
std::string top_level_precision(const config::Config& cfg) {
  if (cfg.boolean("bf16")) return "bf16";
  if (cfg.boolean("fp16")) return "fp16";
  return "fp32";
}

at::ScalarType dtype_of(const std::string& precision) {
  if (precision == "bf16") return at::kBFloat16;
  if (precision == "fp16") return at::kHalf;
  return at::kFloat;
}

// dist_config.mixed_precision follows bf16 / fp16 when unset; a value that says otherwise is a
// contradiction, named with both keys.
at::ScalarType mixed_precision(const config::Config& cfg) {
  const std::string top = top_level_precision(cfg);
  const std::string key = "dist_config.mixed_precision";
  if (cfg.is_set(key) && cfg.string(key) != top) {
    const std::string top_key = top == "fp32" ? "bf16" : top;
    fail(cfg.where(key) + ": mixed_precision = \"" + cfg.string(key) + "\" contradicts " +
             (cfg.is_set(top_key) ? cfg.where(top_key) : "the default") + " (" + top_key + " = " +
             (cfg.boolean(top_key) ? "true" : "false") + ")",
         "make them agree: mixed_precision = \"bf16\" goes with bf16 = true, \"fp32\" with neither "
         "bf16 nor fp16");
  }
  return dtype_of(top);
}

std::string precision_word(at::ScalarType t) {
  return t == at::kBFloat16 ? "bf16" : t == at::kHalf ? "fp16" : "fp32";
}

// dp_sharding.h's rule, T at its largest: micro_batch x cutoff_len tokens on each rank of dp_shard
// (context parallelism splits them among the group's cp ranks).
bool embedding_split_for(const RunPlan& run, const ShardingPlan& plan) {
  const double tokens_in_group = static_cast<double>(run.mesh[MeshDim::DPShard] * run.micro_batch *
                                                     run.sequences_per_sample * run.seq_len);
  return split_embedding_gradient(tokens_in_group, static_cast<double>(run.model.vocab_size),
                                          static_cast<double>(run.model.hidden_size), run.model.tie_word_embeddings,
                                          plan.per_parameter_cut);
}

}  // namespace

const EngineInfo& engine_for(const config::Config& cfg) {
  const std::string& name = cfg.string("distributed");
  for (const auto& e : registry())
    if (e.name() == name) return e;
  std::string available;
  for (const auto& e : registry()) available += (available.empty() ? "" : ", ") + e.name();
  throw config::ConfigError("config error: " + cfg.where("distributed") + ": engine '" + name +
                            "' is not available in this build of lftrain; available: " +
                            available + " (see `lftrain --list-engines`)");
}

namespace {

// dist_config.fp8_enable_fsdp_float8_all_gather for a sharding plan (fsdp2's, megatron's) whose
// offload is decided: only where float8 linears exist and their weights are gathered.
bool float8_all_gather(const config::Config& cfg, const RunPlan& run, const ShardingPlan& plan) {
  const std::string key = "dist_config.fp8_enable_fsdp_float8_all_gather";
  if (!cfg.boolean(key)) return false;
  if (!run.fp8)
    fail(cfg.where(key) + ": the float8 all-gather gathers the weights of float8 linears, and fp8 is false",
         "set fp8 = true, or remove fp8_enable_fsdp_float8_all_gather");
  if (!plan.shard_parameters)
    fail(cfg.where(key) + ": megatron gathers its weights only with data_parallel_sharding_strategy = "
                          "\"optim_grads_params\"; without it there is no all-gather of weights to do in float8",
         "set dist_config.data_parallel_sharding_strategy = \"optim_grads_params\", or remove "
         "fp8_enable_fsdp_float8_all_gather");
  if (plan.offload)
    fail(cfg.where("dist_config.offload_params") +
             ": offload_params with fp8_enable_fsdp_float8_all_gather is not implemented in this build",
         "remove one of them");
  return true;
}

}  // namespace

std::optional<ShardingPlan> sharding_plan(const config::Config& cfg, const RunPlan& run) {
  const EnginePreset preset = engine_for(cfg).preset;
  ShardingPlan plan;
  plan.name = preset_name(preset);
  if (preset == EnginePreset::Fsdp2) {
    plan.per_parameter_cut = true;
    plan.compute_dtype = mixed_precision(cfg);
    plan.reshard_after_forward = cfg.boolean("dist_config.reshard_after_forward");
    plan.offload = cfg.boolean("dist_config.offload_params");
    plan.pin_memory = cfg.boolean("dist_config.pin_memory");
    if (plan.pin_memory && !plan.offload)
      fail(cfg.where("dist_config.pin_memory") + ": pin_memory pins the offloaded shards, and offload_params is false",
           "set offload_params = true, or remove pin_memory");
    plan.float8_all_gather = float8_all_gather(cfg, run, plan);
    plan.description = "per-parameter dim-0 shards over dp_shard, gathered in " +
                       precision_word(plan.compute_dtype) + ", reshard_after_forward = " +
                       (plan.reshard_after_forward ? "true" : "false") +
                       (plan.float8_all_gather ? "; float8 linears' weights gathered as e4m3" : "") +
                       (plan.offload ? "; offload_params" : "");
    plan.split_embedding_gradient = embedding_split_for(run, plan);
    return plan;
  }
  if (preset == EnginePreset::Fsdp) {
    const std::string strategy = cfg.string("dist_config.sharding_strategy");
    const int replicas = run.mesh[MeshDim::DPReplicate];
    const std::string where = cfg.where("dist_config.sharding_strategy");
    if (strategy == "HYBRID_SHARD" && replicas == 1)
      fail(where + ": HYBRID_SHARD shards within a group and replicates across groups, but "
                   "[mesh] dp_replicate is 1",
           "set [mesh] dp_replicate = R and dp_shard = S with R x S = the rank count (R > 1)");
    if (strategy != "HYBRID_SHARD" && strategy != "NO_SHARD" && replicas > 1)
      fail(where + ": " + strategy + " shards over every rank, but [mesh] dp_replicate = " +
               std::to_string(replicas),
           "use sharding_strategy = \"HYBRID_SHARD\" for replicated groups, or dp_replicate = 1");
    const at::ScalarType dtype = mixed_precision(cfg);
    if (strategy == "NO_SHARD") return std::nullopt;
    plan.per_parameter_cut = false;
    plan.compute_dtype = dtype;
    plan.reshard_after_forward = strategy != "SHARD_GRAD_OP";
    plan.description = strategy + ": one flat buffer per unit over dp_shard, gathered in " +
                       precision_word(dtype);
    plan.split_embedding_gradient = embedding_split_for(run, plan);
    return plan;
  }
  if (preset != EnginePreset::DeepSpeed) return std::nullopt;
  const config::DeepSpeedConfig& ds = *run.deepspeed;
  if (ds.zero_stage == 0) return std::nullopt;
  plan.per_parameter_cut = false;
  plan.shard_parameters = ds.zero_stage == 3;
  plan.reduce_during_backward = ds.zero_stage >= 2;
  plan.reshard_after_forward = true;
  plan.compute_dtype = ds.bf16 ? at::kBFloat16 : ds.fp16 ? at::kHalf : at::kFloat;
  plan.offload = ds.offload_optimizer || ds.offload_param;
  plan.pin_memory = ds.pin_memory;
  plan.description = "ZeRO stage " + std::to_string(ds.zero_stage) + " from " + ds.path +
                     (ds.offload_param ? ", parameters and optimizer state offloaded"
                                       : ds.offload_optimizer ? ", optimizer state offloaded" : "");
  plan.split_embedding_gradient = embedding_split_for(run, plan);
  return plan;
}

void check_context_parallel(const config::Config& cfg, const model::ModelConfig& model, int cp, int tp) {
  if (cp == 1) return;
  auto refuse = [&](const std::string& what, const std::string& hint) {
    throw config::ConfigError("config error: " + cfg.where("mesh.cp") + ": " + what + "\n  hint: " + hint);
  };
  if (cfg.string("dist_config.cp_mode") == "ring") {
    if (model.attn_logit_softcapping > 0 || model.query_pre_attn_scalar > 0)
      refuse("dist_config.cp_mode = \"ring\" cannot run this " + model.model_type +
               " model: its attention scores are soft-capped or scaled by query_pre_attn_scalar, which ring "
               "attention's blockwise softmax does not do",
           "use dist_config.cp_mode = \"ulysses\"");
    return;  // every rank keeps every head
  }
  const std::string n = std::to_string(cp);
  if (model.num_attention_heads % (cp * tp) != 0)
    refuse("mesh.cp = " + n + (tp > 1 ? " x mesh.tp = " + std::to_string(tp) : std::string()) +
             " does not divide the model's " + std::to_string(model.num_attention_heads) +
             " attention heads: Ulysses gives each cp rank whole sequences of heads / " + (tp > 1 ? "(tp x cp)" : "cp") +
             " heads",
         "choose a cp that divides num_attention_heads" + std::string(tp > 1 ? " / tp" : "") +
             ", or dist_config.cp_mode = \"ring\" (ring attention keeps every head on every cp rank)");
}

// [mesh] ep against the model: a mixture of experts whose experts ep divides.
static void check_expert_parallel(const config::Config& cfg, const model::ModelConfig& model, int ep) {
  if (ep == 1) return;
  const std::string where = cfg.where("mesh.ep") + " = " + std::to_string(ep);
  if (model.moe.num_experts == 0)
    fail(where + ": expert parallelism spreads a mixture of experts' experts over ranks, and this " + model.model_type +
             " model has none",
         "set mesh.ep = 1 (or remove it)");
  if (model.moe.num_experts % ep != 0)
    fail(where + " does not divide the model's " + std::to_string(model.moe.num_experts) +
             " experts per layer: each ep rank holds the same number of them",
         "choose an ep that divides num_experts");
}

// DoRA's weight norm is taken over a whole output row: under tensor parallelism a row-parallel
// linear's rows are split over the tp ranks (their squares would need a sum over tp in every
// forward, not built), and a float8 linear keeps no weight to take it from.
static void check_dora(const config::Config& cfg, const RunPlan& run) {
  if (!run.finetuning.use_dora) return;
  const std::string why = " = true: DoRA takes the norm of each whole output row of a base weight";
  if (run.mesh[MeshDim::TP] > 1)
    fail(cfg.where("use_dora") + why + ", which tensor parallelism (mesh.tp = " + std::to_string(run.mesh[MeshDim::TP]) +
             ") splits over ranks in the row-parallel linears; DoRA under tensor parallelism is not built",
         "use mesh.tp = 1 (data or pipeline parallelism, or a sharding engine), or remove use_dora");
  if (cfg.boolean("fp8"))
    fail(cfg.where("use_dora") + why + ", and fp8 = true keeps the base weights for float8 GEMMs only",
         "remove fp8, or remove use_dora");
}

// QLoRA's 4-bit base is outside the engines' parameters: the data-parallel engines keep it whole
// (ddp, ZeRO-1/2) or a share of each layer's bytes (fsdp, fsdp2, ZeRO-3); megatron would need it
// cut into its tensor-parallel boxes and pipeline stages, and a mixture of experts' experts are no linears.
static void check_quantization(const config::Config& cfg, const RunPlan& run, EnginePreset preset) {
  if (run.finetuning.quantization_bit == 0) return;
  const std::string where = cfg.where("quantization_bit") + " = " + std::to_string(run.finetuning.quantization_bit);
  if (preset == EnginePreset::Megatron)
    fail(where + ": megatron's tensor-parallel boxes and pipeline stages of a 4-bit base are not built (the "
                 "data-parallel engines keep it whole, or sharded under fsdp, fsdp2 and ZeRO-3)",
         "use distributed = fsdp2, fsdp, ddp or deepspeed (any ZeRO stage) for QLoRA, or remove quantization_bit");
  if (run.model.moe.num_experts > 0)
    fail(where + ": quantizing a mixture of experts' experts (grouped weights, not linears) is not built",
         "remove quantization_bit for this " + run.model.model_type + " model");
  if (cfg.boolean("fp8"))
    fail(where + " and fp8 = true: the 4-bit base is dequantized for its GEMMs, not cast to float8",
         "remove fp8, or remove quantization_bit");
}

ParallelPlan resolve_parallel_plan(const config::Config& cfg, const RunPlan& run, const model::CausalLM& meta) {
  ParallelPlan p;
  p.preset = engine_for(cfg).preset;
  p.bucket_bytes = cfg.real("ddp_bucket_cap_mb") * 1024.0 * 1024.0;
  p.cp_ring = cfg.string("dist_config.cp_mode") == "ring";
  check_context_parallel(cfg, run.model, run.mesh[MeshDim::CP], run.mesh[MeshDim::TP]);
  check_expert_parallel(cfg, run.model, run.mesh.ep);
  check_dora(cfg, run);
  check_quantization(cfg, run, p.preset);
  if (p.preset == EnginePreset::Megatron) {
    p.megatron = make_megatron_plan(cfg, meta, run.mesh, run.nccl);
    if (p.megatron->dp_sharding != DpSharding::NoShard) p.sharded = megatron_sharding_plan(*p.megatron, run.compute);
    // Offload is the sharded component's (fsdp2's keys): over megatron's tensor-parallel boxes as
    // over fsdp2's whole parameters.
    const bool offload = cfg.boolean("dist_config.offload_params"), pin = cfg.boolean("dist_config.pin_memory");
    if (offload && !p.sharded)
      fail(cfg.where("dist_config.offload_params") +
               ": offload_params keeps the shards of megatron's sharded data parallelism in host memory, and this run "
               "has none (no data_parallel_sharding_strategy, no use_distributed_optimizer)",
           "set dist_config.data_parallel_sharding_strategy (optim, optim_grads, optim_grads_params) or "
           "use_distributed_optimizer, or remove offload_params");
    if (pin && !offload)
      fail(cfg.where("dist_config.pin_memory") + ": pin_memory pins the offloaded shards, and offload_params is false",
           "set offload_params = true, or remove pin_memory");
    if (p.sharded) {
      p.sharded->offload = offload;
      p.sharded->pin_memory = pin;
      p.sharded->float8_all_gather = float8_all_gather(cfg, run, *p.sharded);
    } else {
      ShardingPlan none;  // no sharding strategy: no weights gathered (refused when asked)
      none.shard_parameters = false;
      float8_all_gather(cfg, run, none);
    }
  } else {
    p.sharded = sharding_plan(cfg, run);
  }
  if (run.deepspeed) p.notes = run.deepspeed->notes;
  return p;
}

}  // namespace lft::engine
