#include "lft/engine/megatron_plan.h"

#include <stdexcept>

#include "lft/engine/tensor_parallel.h"

namespace lft::engine {

ShardingPlan megatron_sharding_plan(const MegatronPlan& p, at::ScalarType compute) {
  ShardingPlan plan;
  plan.name = "megatron";
  plan.per_parameter_cut = true;
  plan.shard_parameters = p.dp_sharding == DpSharding::OptimGradsParams;
  plan.reduce_during_backward = p.dp_sharding == DpSharding::OptimGrads || plan.shard_parameters;
  plan.reshard_after_forward = true;
  plan.compute_dtype = plan.shard_parameters ? compute : at::kFloat;
  return plan;
}

int stage_of_unit(const MegatronPlan& plan, const model::CausalLM& model, std::int64_t unit) {
  if (unit == 0) return 0;
  if (unit == model.head_unit()) return plan.pp - 1;
  for (std::size_t g = 0; g < plan.stage_layers.size(); ++g)
    if (unit - 1 >= plan.stage_layers[g].first && unit - 1 < plan.stage_layers[g].second)
      return static_cast<int>(g) % plan.pp;
  throw std::logic_error("megatron: unit " + std::to_string(unit) + " is on no stage");
}

TpSlice tp_slice(const model::TpSplit& split, int tp, int r) {
  TpSlice s;
  if (tp == 1) return s;
  if (!split.split()) {
    s.holders = tp;
    s.holder = r;
    return s;
  }
  s.dim = split.dim();
  if (split.replicable && split.groups % tp != 0) {
    const int share = tp / static_cast<int>(split.groups);  // ranks serving one group
    s.begin = (r / share) * split.group_size;
    s.count = split.group_size;
    s.holders = share;
    s.holder = r % share;
    return s;
  }
  const SplitRange groups = split_range(split.groups, tp, r);
  s.begin = groups.begin * split.group_size;
  s.count = groups.count * split.group_size;
  return s;
}

}  // namespace lft::engine
