// What megatron's data parallelism shards (Megatron-Core's data_parallel_sharding_strategy), beside
// the parameters' tensor-parallel boxes; the planner's layouts name it too.
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

}  // namespace lft::engine
