// What megatron's data parallelism shards (Megatron-Core's data_parallel_sharding_strategy), beside
// the parameters' tensor-parallel boxes; the planner's layouts name it too. And when the sharded
// engines split the embedding's gradient.
#pragma once

namespace lft::engine {

enum class DpSharding {
  NoShard,          // gradients all-reduced in buckets during backward
  Optim,            // optimizer state and fp32 update (ZeRO-1)
  OptimGrads,       // and gradients, reduce-scattered during backward (ZeRO-2)
  OptimGradsParams  // and parameters, gathered per layer (ZeRO-3 / FSDP)
};

// The key's value: "no_shard", "optim", "optim_grads", "optim_grads_params".
inline const char* dp_sharding_name(DpSharding s) {
  switch (s) {
    case DpSharding::Optim: return "optim";
    case DpSharding::OptimGrads: return "optim_grads";
    case DpSharding::OptimGradsParams: return "optim_grads_params";
    default: return "no_shard";
  }
}

// Whether the sharded engines split an embedding's gradient (ShardingPlan::split_embedding_gradient):
// when gathering the looked-up rows (their indices and fp32 values from every rank of the shard
// group: 8 + 4 H bytes for each of `tokens_in_group` tokens a micro-batch) moves fewer bytes than
// reduce-scattering the whole table (4 V H). Roughly: fewer tokens in the group than the vocabulary
// has rows. An untied embedding in a flat cut (fsdp, ZeRO) stays dense: the cut that holds its rows
// is fixed by the whole unit, so leaving them out of the reduce-scatter would save no bytes. The
// engine and the planner both decide by this.
inline bool split_embedding_gradient(double tokens_in_group, double vocab, double hidden, bool tied,
                                     bool per_parameter_cut) {
  if (!tied && !per_parameter_cut) return false;
  return tokens_in_group * (8 + 4 * hidden) < 4 * vocab * hidden;
}

}  // namespace lft::engine
