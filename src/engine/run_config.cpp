// The run plan's decoders: the configuration's keys read into a RunPlan (run_plan.h). With
// parallel_config.cpp, megatron_config.cpp and mesh_config.cpp, the only files of the engine layer
// that read configuration keys; every other file reads the plan.
#include <algorithm>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "lft/config/batching.h"
#include "lft/config/list_names.h"
#include "lft/engine/memory_estimate.h"
#include "lft/engine/parallel_config.h"
#include "lft/engine/registry.h"
#include "lft/engine/run_plan.h"
#include "lft/model/adapter_weights.h"
#include "lft/model/float8.h"
#include "lft/model/fused.h"
#include "lft/model/prequantized.h"
#include "lft/model/layers.h"
#include "lft/model/score_head.h"
#include "lft/runtime/stage.h"

namespace lft::engine {

namespace {

// A list key's names (config/list_names.h).
std::vector<std::string> names(const config::Config& cfg, const std::string& key) {
  return config::list_names(cfg.strings(key));
}

[[noreturn]] void adapter_conflict(const config::Config& cfg, const std::string& key, const std::string& theirs) {
  throw config::ConfigError("config error: " + cfg.where(key) + ": " + key + " contradicts adapter_name_or_path " +
                            cfg.string("adapter_name_or_path") + ", whose adapter has " + theirs +
                            "\n  hint: remove " + key + ": training continues the adapter as it was made");
}

std::string text_of(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ",") + s;
  return out;
}

void take_adapter_config(const config::Config& cfg, model::FinetuningSpec& f) {
  const model::PeftAdapter adapter(cfg.string("adapter_name_or_path"));
  if (cfg.is_set("lora_rank") && f.lora_rank != adapter.rank)
    adapter_conflict(cfg, "lora_rank", "r = " + std::to_string(adapter.rank));
  if (cfg.is_set("lora_alpha") && f.lora_alpha != adapter.lora_alpha)
    adapter_conflict(cfg, "lora_alpha", "lora_alpha = " + std::to_string(adapter.lora_alpha));
  if (cfg.is_set("use_rslora") && f.use_rslora != adapter.use_rslora)
    adapter_conflict(cfg, "use_rslora", std::string("use_rslora = ") + (adapter.use_rslora ? "true" : "false"));
  if (cfg.is_set("use_dora") && f.use_dora != adapter.use_dora)
    adapter_conflict(cfg, "use_dora", std::string("use_dora = ") + (adapter.use_dora ? "true" : "false"));
  auto sorted = [](std::vector<std::string> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  // lora_target = "all" (LlamaFactory's default in its examples) leaves the choice to the adapter.
  const bool all = f.lora_target == std::vector<std::string>{"all"};
  if (cfg.is_set("lora_target") && !all && sorted(f.lora_target) != sorted(adapter.target_modules))
    adapter_conflict(cfg, "lora_target", "target_modules = " + text_of(adapter.target_modules));
  if (cfg.is_set("additional_target") && sorted(f.additional_target) != sorted(adapter.modules_to_save))
    adapter_conflict(cfg, "additional_target", "modules_to_save = " + text_of(adapter.modules_to_save));
  f.lora_rank = adapter.rank;
  f.lora_alpha = adapter.lora_alpha;
  f.use_rslora = adapter.use_rslora;
  f.use_dora = adapter.use_dora;
  f.lora_target = adapter.target_modules;
  f.additional_target = adapter.modules_to_save;
  if (!cfg.is_set("lora_dropout")) f.lora_dropout = adapter.lora_dropout;
}

// A model folder bitsandbytes saved in 4 bits decides the quantization (as in LlamaFactory, where
// quantization_bit does not apply to such a model); only adapters train over it, and keys that
// say otherwise are errors.
void take_prequantization(const config::Config& cfg, model::FinetuningSpec& f) {
  if (!cfg.is_set("model_name_or_path")) return;
  const std::optional<model::Prequantization> saved = model::read_prequantization(cfg.string("model_name_or_path"));
  if (!saved) return;
  if (f.type != "lora")
    throw config::ConfigError(cfg.where("finetuning_type") + " = \"" + f.type + "\": model_name_or_path " +
                              cfg.string("model_name_or_path") +
                              " holds 4-bit linears saved by bitsandbytes, over which only adapters train (QLoRA)"
                              "\n  hint: set finetuning_type = \"lora\", or train from the full-precision model");
  const std::string folder = "model_name_or_path " + cfg.string("model_name_or_path") + " holds 4-bit " + saved->type +
                             (saved->double_quant ? " (double quantization)" : "") + " linears saved by bitsandbytes";
  auto contradicts = [&](const char* key) {
    throw config::ConfigError(cfg.where(key) + " contradicts it: " + folder +
                              "\n  hint: remove " + key + ": the folder's quantization applies");
  };
  if (cfg.is_set("quantization_bit") && cfg.integer("quantization_bit") != 4) contradicts("quantization_bit");
  if (cfg.is_set("quantization_type") && cfg.string("quantization_type") != saved->type) contradicts("quantization_type");
  if (cfg.is_set("double_quantization") && cfg.boolean("double_quantization") != saved->double_quant)
    contradicts("double_quantization");
  f.quantization_bit = 4;
  f.quantization_type = saved->type;
  f.double_quantization = saved->double_quant;
}

}  // namespace

model::FinetuningSpec finetuning_spec(const config::Config& cfg) {
  model::FinetuningSpec f;
  f.type = cfg.string("finetuning_type");
  if (f.type == "lora") {
    f.lora_rank = cfg.integer("lora_rank");
    f.lora_alpha = cfg.is_set("lora_alpha") ? static_cast<double>(cfg.integer("lora_alpha")) : 2.0 * static_cast<double>(f.lora_rank);
    f.lora_dropout = cfg.real("lora_dropout");
    f.use_rslora = cfg.boolean("use_rslora");
    f.use_dora = cfg.boolean("use_dora");
    f.quantization_bit = static_cast<int>(cfg.integer("quantization_bit"));
    f.quantization_type = cfg.string("quantization_type");
    f.double_quantization = cfg.boolean("double_quantization");
    f.lora_target = names(cfg, "lora_target");
    if (cfg.is_set("additional_target")) f.additional_target = names(cfg, "additional_target");
    if (cfg.is_set("adapter_name_or_path")) take_adapter_config(cfg, f);
  } else if (f.type == "freeze") {
    f.freeze_trainable_layers = cfg.integer("freeze_trainable_layers");
    f.freeze_trainable_modules = names(cfg, "freeze_trainable_modules");
    if (cfg.is_set("freeze_extra_modules")) f.freeze_extra_modules = names(cfg, "freeze_extra_modules");
  }
  take_prequantization(cfg, f);
  return f;
}

namespace {

// _scaled_mm on CUDA takes only widths that are multiples of 16: each float8 linear's weight, as
// every tensor-parallel rank holds it, is checked before anything starts (the token count is
// padded instead: float8.cpp).
void check_float8_widths(const config::Config& cfg, const model::CausalLM& model, int tp) {
  for (const auto& item : model.named_modules()) {
    const auto linear = std::dynamic_pointer_cast<model::LinearImpl>(item.value());
    if (!linear || !linear->float8) continue;
    const std::string name = item.key() + ".weight";
    const model::TpSplit split = model.placement(name).tp;
    for (int r = 0; r < tp; ++r) {
      std::int64_t shape[2] = {linear->out_features, linear->in_features};
      if (tp > 1 && split.split()) {
        const TpSlice slice = tp_slice(split, tp, r);
        shape[slice.dim] = slice.count;
      }
      for (const std::int64_t width : shape) {
        if (width % model::kFloat8Multiple == 0) continue;
        const std::string whole = "[" + std::to_string(linear->out_features) + ", " + std::to_string(linear->in_features) + "]";
        const std::string shard = "[" + std::to_string(shape[0]) + ", " + std::to_string(shape[1]) + "]";
        throw config::ConfigError(
            "config error: " + cfg.where("fp8") + ": fp8 = true multiplies through _scaled_mm, which takes widths that "
            "are multiples of " + std::to_string(model::kFloat8Multiple) + "; " + name + " is " + whole +
            (tp > 1 && split.split() ? ", " + shard + " on tensor-parallel rank " + std::to_string(r) + " of " + std::to_string(tp) : "") +
            "\n  hint: choose hidden_size, intermediate_size and head counts whose widths (per tensor-parallel rank) are "
            "multiples of " + std::to_string(model::kFloat8Multiple) + ", or remove fp8");
      }
    }
  }
}

}  // namespace

std::shared_ptr<model::CausalLM> checked_meta_model(const config::Config& cfg, const RunPlan& p) {
  try {
    return create_run_model(p, at::TensorOptions().device(at::kMeta));
  } catch (const model::FinetuningError& e) {
    throw config::ConfigError("config error: " + cfg.where(e.key) + ": " + e.what());
  }
}

unsigned fused_kernels_of(const config::Config& cfg) {
  try {
    return model::parse_fused_kernels(cfg.string("fused_kernels"));
  } catch (const std::invalid_argument& e) {
    throw config::ConfigError("config error: " + cfg.where("fused_kernels") + ": " + e.what());
  }
}

RunPlan resolve_run_plan(const config::Config& cfg, const MeshShape& mesh, bool nccl, bool cpu) {
  RunPlan p;
  p.nccl = nccl;
  p.cpu = cpu;
  p.fused_attention = (fused_kernels_of(cfg) & model::kFusedAttention) != 0 && model::fused_kernels_supported();
  p.model = model::ModelConfig::from_run_config(cfg);
  p.mesh = mesh;
  p.micro_batch = cfg.integer("per_device_train_batch_size");
  p.sequences_per_sample = trains_on_pairs(cfg.string("stage")) ? 2 : 1;
  model::set_score_head(p.model, cfg.string("stage"), cfg.string("rm_head"));
  p.accumulation = cfg.integer("gradient_accumulation_steps");
  p.global_batch = p.micro_batch * p.accumulation * mesh.dp_size();
  p.seq_len = cfg.integer("cutoff_len");
  p.dynamic_batching = config::batches_by_tokens(cfg.string("batching_strategy"));
  p.joined_micro_batches = config::joins_micro_batches(cfg.string("batching_strategy"));
  p.max_steps = cfg.integer("max_steps");
  p.epochs = cfg.real("num_train_epochs");
  p.compute = cfg.boolean("bf16") ? at::kBFloat16 : cfg.boolean("fp16") ? at::kHalf : at::kFloat;
  p.gradient_checkpointing = cfg.boolean("gradient_checkpointing");
  p.fp8 = cfg.boolean("fp8");
  p.muon = cfg.boolean("use_muon");
  p.muon_adapters = cfg.boolean("muon_adapters");
  p.finetuning = finetuning_spec(cfg);
  p.seed = static_cast<std::uint64_t>(cfg.integer("seed"));
  if (p.finetuning.type == "lora" && cfg.is_set("adapter_name_or_path")) p.adapter_folder = cfg.string("adapter_name_or_path");
  // Module names (and float8 widths) checked before anything starts.
  const std::shared_ptr<model::CausalLM> shape = checked_meta_model(cfg, p);
  if (p.fp8) check_float8_widths(cfg, *shape, mesh[MeshDim::TP]);
  if (config::capabilities_of(cfg.string("distributed")).deepspeed_config) p.deepspeed = config::read_deepspeed_config(cfg, mesh.dp_size());
  p.parallel = resolve_parallel_plan(cfg, p, *shape);
  p.memory = engine_info(p.parallel.preset).estimate_memory(p);
  add_expert_parallel_memory(p, p.memory);
  add_muon_memory(p, p.memory);
  if (cfg.boolean("async_checkpoint") && cfg.string("save_strategy") != "no")
    p.memory.checkpoint_staging = p.memory.weights + p.memory.optimizer;
  add_quantized_base_memory(p, p.memory);  // after the staging: checkpoints never hold the 4-bit base
  return p;
}

}  // namespace lft::engine
