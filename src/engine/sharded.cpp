#include "lft/engine/sharded.h"

#include "lft/model/causal_lm.h"
#include "lft/model/quantized_base.h"

namespace lft::engine {

ShardedEngine::ShardedEngine(const EngineContext& ctx, ShardingPlan plan)
    : shard_comm_(ctx.mesh.device_shard_cp()),
      replicate_comm_(ctx.mesh.device_comm(MeshDim::DPReplicate)),
      dp_(std::move(plan), shard_comm_, replicate_comm_) {}

ShardedEngine::~ShardedEngine() = default;

void ShardedEngine::prepare_from(model::CausalLM& model, const model::WeightSource& weights) {
  if (!dp_.plan().shard_parameters) {
    Engine::prepare_from(model, weights);  // whole parameters read first, then prepare()
    return;
  }
  take_parameters(model, &weights);
}

void ShardedEngine::take_parameters(model::CausalLM& model, const model::WeightSource* weights) {
  // Frozen parameters (fine-tuning) are sharded and gathered like the others when parameters are
  // sharded, but never reduced or updated; otherwise they stay whole in the model.
  std::vector<DataParallelParameter> params;
  for (const auto& item : model.named_parameters()) {
    if (!item.value().requires_grad() && !dp_.plan().shard_parameters) continue;
    DataParallelParameter p;
    p.name = item.key();
    p.tensor = item.value();
    p.unit = sharded_unit_of(model, item.key());
    p.box.global_shape = item.value().sizes().vec();
    p.box.offset.assign(p.box.global_shape.size(), 0);
    params.push_back(std::move(p));
  }
  // QLoRA's 4-bit base (no parameters): a share of each layer's bytes per rank where parameters
  // are sharded (the same bytes on every rank: quantized together or read from one folder).
  std::vector<DataParallelBytes> bytes;
  if (dp_.plan().shard_parameters)
    for (model::QuantizedTensor& q : model::quantized_base_tensors(model))
      bytes.push_back({q.name, std::move(q.tensor), sharded_unit_of(model, q.name.substr(0, q.name.rfind('.')))});
  // Every rank starts from the same weights: equal by construction or read from the same files;
  // the broadcast makes constructed ones so.
  dp_.prepare(model, std::move(params), weights, /*broadcast=*/true, std::move(bytes));
}

at::Tensor ShardedEngine::grad_norm_squared() {
  const std::vector<at::Tensor>& pieces = dp_.pieces();
  at::Tensor t = local_grad_norm_squared(pieces, shard_comm_.device());
  shard_comm_.all_reduce(t, ReduceOp::Sum);
  return t;
}

std::vector<Communicator*> ShardedEngine::communicators() const {
  if (replicate_comm_.size() > 1) return {&shard_comm_, &replicate_comm_};
  return {&shard_comm_};
}

}  // namespace lft::engine
