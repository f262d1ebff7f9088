// Per-rank tensor memory of a run, from the plan alone (no tensor is allocated): what each
// engine's layout keeps, what it gathers, and what backward keeps of the forward. The engines'
// registry entries point at these; tests hold them to the measured peak.
#pragma once

#include "lft/engine/run_plan.h"
#include "lft/engine/sharded.h"

namespace lft::engine {

// none (buckets false) and ddp / fsdp NO_SHARD / ZeRO-0 (the all-reduce buckets): every rank
// keeps the whole model, its gradients and AdamW's moments.
MemoryEstimate estimate_replicated(const RunPlan& run, bool buckets);
// fsdp2, fsdp, ZeRO 1-3 on the dp_shard ranks (ShardingPlan).
MemoryEstimate estimate_sharded(const RunPlan& run, const ShardingPlan& plan);
// megatron: this rank's tensor-parallel boxes of its pipeline stage's units.
MemoryEstimate estimate_megatron(const RunPlan& run);
// Expert parallelism ([mesh] ep > 1): the estimates above leave the experts out (the engine never
// sees them); this adds this rank's experts, whole, with their gradients, optimizer state and
// gradient buckets (ExpertParallelEngine).
void add_expert_parallel_memory(const RunPlan& run, MemoryEstimate& e);
// QLoRA (quantization_bit = 4): the estimates above leave the quantized weights out (no engine
// holds them); this adds their 4-bit bytes, whole on every rank, and one dequantized at a time.
void add_quantized_base_memory(const RunPlan& run, MemoryEstimate& e);
// use_muon: Muon's matrices keep a momentum buffer and no second moment (half AdamW's state).
void add_muon_memory(const RunPlan& run, MemoryEstimate& e);

}  // namespace lft::engine
