#include "lft/engine/run_plan.h"

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <memory>
#include <string>

#include "lft/model/families.h"
#include "lft/model/float8.h"

namespace lft::engine {

std::shared_ptr<model::CausalLM> create_run_model(const RunPlan& plan, const c10::TensorOptions& options) {
  std::shared_ptr<model::CausalLM> m = model::create_causal_lm(plan.model, options);
  if (plan.fp8) model::use_float8_linears(*m);
  model::apply_finetuning(*m, plan.finetuning, options);
  return m;
}

void check_fits_in_memory(const RunPlan& p, int ranks_on_node, double node_bytes) {
  const double share = node_bytes / std::max(1, ranks_on_node);
  if (p.memory.resident() <= share) return;
  char have[64];
  std::snprintf(have, sizeof have, "%.1f GiB", share / (1024.0 * 1024.0 * 1024.0));
  throw config::ConfigError(
      "config error: the run needs about " + p.memory.str() + ", and each of the " + std::to_string(ranks_on_node) +
      " rank(s) on this node has " + have + " of the memory available there (what the kernel reports available, at most 95% of the node's)\n  hint: spread the model over more ranks, use a "
      "sharding engine (fsdp2, deepspeed ZeRO-3, megatron), gradient_checkpointing = true, or a smaller "
      "per_device_train_batch_size or cutoff_len");
}

namespace {

std::string ranks(std::int64_t n) { return std::to_string(n) + (n == 1 ? " rank" : " ranks"); }

}  // namespace

std::string plan_report(const RunPlan& p) {
  std::string out = "plan:\n";
  if (p.dynamic_batching) {
    out += "  batch      micro-batches of at most " + std::to_string(p.micro_batch) + " x " + std::to_string(p.seq_len) +
           (p.joined_micro_batches ? " tokens, its samples joined in one row (dynamic_padding_free"
                                   : " padded tokens (dynamic_batching") +
           ": each rank its own stream) x " + std::to_string(p.accumulation) + " accumulation x " +
           std::to_string(p.mesh.dp_size()) + " data-parallel per step\n";
  } else {
    out += "  batch      " + std::to_string(p.micro_batch) + " per rank x " + std::to_string(p.accumulation) +
           " accumulation x " + std::to_string(p.mesh.dp_size()) + " data-parallel = " +
           std::to_string(p.global_batch) + (p.sequences_per_sample == 2 ? " pairs (chosen and rejected sequences)" : " sequences") +
           " of " + std::to_string(p.seq_len) + " tokens per step" +
           (p.joined_micro_batches ? ", each micro-batch's joined in one row (padding_free)" : "") + "\n";
  }
  char epochs[32];
  std::snprintf(epochs, sizeof epochs, "%g", p.epochs);
  out += "  steps      " + (p.max_steps > 0 ? std::to_string(p.max_steps) + " (max_steps)"
                                         : std::string(epochs) + " epoch(s) (num_train_epochs)");
  out += "\n  model      " + p.model.summary();
  if (p.finetuning.type == "lora")
    out += "\n  finetuning lora: rank " + std::to_string(p.finetuning.lora_rank) + ", scaling " +
           std::to_string(p.finetuning.lora_scaling()).substr(0, 6) + ", beside " + [&] {
             std::string t;
             for (const std::string& name : p.finetuning.lora_target) t += (t.empty() ? "" : ", ") + name;
             return t;
           }() + "; base frozen" +
           (p.finetuning.quantization_bit == 4
                ? ", quantized to 4-bit " + p.finetuning.quantization_type +
                      (p.finetuning.double_quantization ? " (double quantization)" : "") +
                      (p.parallel.sharded && p.parallel.sharded->shard_parameters
                           ? ", each layer's 4-bit bytes sharded over " + ranks(p.mesh[MeshDim::DPShard] * p.mesh[MeshDim::CP])
                           : ", whole on every rank")
                : std::string());
  else if (p.finetuning.type == "freeze")
    out += "\n  finetuning freeze: " +
           std::string(p.finetuning.freeze_trainable_layers >= 0 ? "last " : "first ") +
           std::to_string(std::abs(p.finetuning.freeze_trainable_layers)) + " layer(s) train, the rest frozen";
  out += std::string("\n  precision  ") +
         (p.compute == at::kBFloat16 ? "bf16 compute over fp32 weights"
          : p.compute == at::kHalf   ? "fp16 compute over fp32 weights, dynamic loss scaling"
                                     : "fp32");
  if (p.fp8)
    out += ", float8 linears (e4m3 forward, e5m2 output gradients, tensorwise dynamic scales; _scaled_mm on "
           "CUDA, on CPU the float8 values widened to fp32 for the GEMM)";
  out += "\n  memory     " + p.memory.str();
  return out;
}

}  // namespace lft::engine
