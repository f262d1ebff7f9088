// Sharded data parallel over the whole model: the engine behind fsdp2, fsdp and deepspeed ZeRO 1-3
// (docs/engines.md). The algorithm is the ShardedDataParallel component
// (sharded_data_parallel.h) over dp_shard x cp, replicated over dp_replicate (HSDP); this engine
// hands it every parameter of the model, whole.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "lft/engine/engine.h"
#include "lft/engine/sharded_data_parallel.h"

namespace lft::engine {

class ShardedEngine final : public Engine {
 public:
  ShardedEngine(const EngineContext& ctx, ShardingPlan plan);
  ~ShardedEngine() override;
  const char* name() const override { return dp_.plan().name.c_str(); }
  void prepare(model::CausalLM& model) override { take_parameters(model, nullptr); }
  void prepare_from(model::CausalLM& model, const model::WeightSource& weights) override;
  bool reads_weight_shards() const override { return dp_.plan().shard_parameters; }
  void begin_micro_batch(bool sync) override { dp_.begin_micro_batch(sync); }
  void finish_gradients() override { dp_.finish_gradients(); }
  void parameters_updated() override { dp_.parameters_updated(); }
  std::vector<at::Tensor> parameters() override { return dp_.pieces(); }
  std::vector<std::string> parameter_names() override { return dp_.names(); }
  std::vector<TensorBox> parameter_boxes() override { return dp_.boxes(); }
  Communicator* piece_group() override { return &shard_comm_; }
  at::Tensor grad_norm_squared() override;
  std::vector<Communicator*> communicators() const override;

  const ShardedDataParallel& data_parallel() const { return dp_; }

 private:
  void take_parameters(model::CausalLM& model, const model::WeightSource* weights);

  Communicator& shard_comm_;
  Communicator& replicate_comm_;
  ShardedDataParallel dp_;
};

}  // namespace lft::engine
