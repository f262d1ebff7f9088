#include "lft/engine/run_plan.h"

#include <algorithm>
#include <cstdio>

#include "lft/engine/registry.h"
#include "lft/runtime/log.h"

namespace lft::engine {

RunPlan resolve_run_plan(const config::Config& cfg, const MeshShape& mesh) {
  RunPlan p;
  p.model = model::ModelConfig::from_run_config(cfg);
  p.mesh = mesh;
  p.micro_batch = cfg.integer("per_device_train_batch_size");
  p.accumulation = cfg.integer("gradient_accumulation_steps");
  p.global_batch = p.micro_batch * p.accumulation * mesh.dp_size();
  p.seq_len = cfg.integer("cutoff_len");
  p.compute = cfg.boolean("bf16") ? at::kBFloat16 : cfg.boolean("fp16") ? at::kHalf : at::kFloat;
  p.gradient_checkpointing = cfg.boolean("gradient_checkpointing");
  if (cfg.string("distributed") == "deepspeed") p.deepspeed = config::read_deepspeed_config(cfg, mesh.dp_size());
  p.memory = engine_for(cfg).estimate_memory(cfg, p);
  return p;
}

void check_fits_in_memory(const RunPlan& p, int ranks_on_node, double node_bytes) {
  const double share = node_bytes / std::max(1, ranks_on_node);
  if (p.memory.total() <= share) return;
  char have[64];
  std::snprintf(have, sizeof have, "%.1f GiB", share / (1024.0 * 1024.0 * 1024.0));
  throw config::ConfigError(
      "config error: the run needs about " + p.memory.str() + ", and each of the " + std::to_string(ranks_on_node) +
      " rank(s) on this node has " + have + " of its memory\n  hint: spread the model over more ranks, use a "
      "sharding engine (fsdp2, deepspeed ZeRO-3, megatron), gradient_checkpointing = true, or a smaller "
      "per_device_train_batch_size or cutoff_len");
}

std::string plan_report(const config::Config& cfg, const RunPlan& p) {
  std::string out = "plan:\n";
  out += "  batch      " + std::to_string(p.micro_batch) + " per rank x " + std::to_string(p.accumulation) +
         " accumulation x " + std::to_string(p.mesh.dp_size()) + " data-parallel = " +
         std::to_string(p.global_batch) + " sequences of " + std::to_string(p.seq_len) + " tokens per step\n";
  const std::int64_t max_steps = cfg.integer("max_steps");
  char epochs[32];
  std::snprintf(epochs, sizeof epochs, "%g", cfg.real("num_train_epochs"));
  out += "  steps      " + (max_steps > 0 ? std::to_string(max_steps) + " (max_steps)"
                                         : std::string(epochs) + " epoch(s) (num_train_epochs)");
  out += "\n  model      " + p.model.summary();
  out += std::string("\n  precision  ") +
         (p.compute == at::kBFloat16 ? "bf16 compute over fp32 weights"
          : p.compute == at::kHalf   ? "fp16 compute over fp32 weights, dynamic loss scaling"
                                     : "fp32");
  out += "\n  memory     " + p.memory.str();
  return out;
}

}  // namespace lft::engine
