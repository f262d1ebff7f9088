// Sharded data parallel: the engine behind fsdp2, fsdp and deepspeed ZeRO 1-3 (ARCHITECTURE.md,
// "Engine"; docs/engines.md). Parameters are grouped in units: one per decoder layer (the model's layer units), and a
// root unit for the rest (embedding, final norm, head). Each rank keeps an fp32 shard of every unit
// (shard_layout.h) and updates only that; the optimizer's tensors are views of it.
//
//   shard_parameters (fsdp, fsdp2, ZeRO-3): a unit's parameters exist whole only while it runs:
//     all-gathered (in the compute dtype) before its forward, the next unit's gather launched
//     meanwhile; freed after its forward when reshard_after_forward, gathered again (with the
//     previous unit prefetched) when its output's gradient arrives; freed after its backward.
//   otherwise (ZeRO-1/2): every rank keeps whole fp32 parameters; after each optimizer step the
//     updated shards are all-gathered into them, each unit's gather waited for just before its
//     forward in the next step.
//   reduce_during_backward (all but ZeRO-1): when the last gradient of a unit has been
//     accumulated, the unit's gradients are reduce-scattered (fp32, sum) and the whole gradients
//     freed; ZeRO-1 keeps whole gradients over the micro-batches and does so in the last one.
// With dp_replicate > 1 (HSDP) the shards are all-reduced over the replicas after the last
// micro-batch.
//   offload (fsdp2 offload_params, DeepSpeed offload_optimizer / offload_param): the fp32 shards,
//     their gradients and so the optimizer's state live in host memory (pinned with pin_memory
//     on a GPU); each gather copies the shard to the compute device first, each reduced gradient
//     shard comes back to the host, and AdamW steps there. On a CPU run the same copies run
//     host to host.
#pragma once

#include <c10/core/ScalarType.h>

#include <memory>
#include <string>
#include <vector>

#include "lft/engine/engine.h"
#include "lft/engine/shard_layout.h"
#include "lft/model/causal_lm.h"
#include "lft/model/layers.h"

namespace lft::engine {

struct ShardingPlan {
  std::string name;  // the `distributed` value
  bool per_parameter_cut = true;   // fsdp2: each parameter's dim 0; else one flat buffer per unit
  bool shard_parameters = true;
  bool reshard_after_forward = true;
  bool reduce_during_backward = true;
  at::ScalarType compute_dtype = at::kFloat;  // dtype of gathered parameters
  // fsdp2's fp8_enable_fsdp_float8_all_gather: the weights of float8 linears are cast to e4m3 on
  // each rank with the whole weight's scale (amax agreed over the shard group) and gathered as
  // one byte an element; the matmul takes them without a second cast.
  bool float8_all_gather = false;
  bool offload = false;     // shards, gradients and optimizer state in host memory
  bool pin_memory = false;  // page-locked host memory for them (GPU runs)
  std::string description;                    // one line for the start-up log
};

// The unit parameter `name` of `model` belongs to: its decoder layer's unit, or the root unit 0
// for everything else (embedding, final norm, head).
std::size_t sharded_unit_of(const model::CausalLM& model, const std::string& name);

class ShardedEngine final : public Engine, private model::LayerHooks {
 public:
  ShardedEngine(const EngineContext& ctx, ShardingPlan plan);
  ~ShardedEngine() override;
  const char* name() const override { return plan_.name.c_str(); }
  void prepare(model::CausalLM& model) override;
  void prepare_from(model::CausalLM& model, const model::WeightSource& weights) override;
  bool reads_weight_shards() const override { return plan_.shard_parameters; }
  void begin_micro_batch(bool sync) override;
  void finish_gradients() override;
  void parameters_updated() override;
  std::vector<at::Tensor> parameters() override { return pieces_; }
  std::vector<std::string> parameter_names() override { return names_; }
  std::vector<TensorBox> parameter_boxes() override { return boxes_; }
  at::Tensor grad_norm_squared() override;
  std::vector<Communicator*> communicators() const override;

  const ShardingPlan& plan() const { return plan_; }
  // Bytes of whole (gathered) parameter storage held now, and, per layer, right after that
  // layer's forward (measured on the parameters' storage; for tests and the summary).
  std::int64_t gathered_bytes() const;
  const std::vector<std::int64_t>& bytes_after_layer_forward() const { return after_forward_; }
  // Unsharded bytes of the largest unit in the compute dtype.
  std::int64_t largest_unit_bytes() const;

 private:
  struct Unit;
  class GradReadyHook;

  void before_layer(std::int64_t index) override;
  void after_layer(std::int64_t index, const at::Tensor& output) override;
  void build_units(model::CausalLM& model);
  // This rank's shard of the unit's parameter at position `i`, a view of its master.
  at::Tensor master_view(const Unit& u, std::size_t i) const;
  void launch_gather(Unit& u);
  void finish_gather(Unit& u);
  void ensure_gathered(Unit& u);
  void prefetch(std::size_t unit);
  void free_parameters(Unit& u);
  void on_gradient_ready(std::size_t param);
  void launch_reduce(Unit& u);
  void finish_reduce(Unit& u);
  void finish_all_reduces();
  // On the compute device: `host` itself, or with offload a copy of it (in `dtype`).
  at::Tensor to_device(const at::Tensor& host, at::ScalarType dtype) const;

  ShardingPlan plan_;
  Communicator& shard_comm_;
  Communicator& replicate_comm_;
  int replica_ = 0;
  std::vector<at::Tensor> params_;     // the model's parameters (whole, or empty when freed)
  const model::WeightSource* weights_ = nullptr;  // during prepare_from: where shards are read
  std::vector<Shape> shapes_;          // their global shapes
  std::vector<std::size_t> unit_of_;   // per parameter
  std::vector<std::unique_ptr<Unit>> units_;  // [0] root, [1 + i] layer i
  std::vector<at::Tensor> pieces_;     // this rank's boxes (views of the units' masters)
  std::vector<std::string> names_;
  std::vector<TensorBox> boxes_;
  std::vector<std::int64_t> after_forward_;
  std::vector<model::LinearImpl*> float8_linear_;  // per parameter: its float8 linear (all-gather in e4m3)
  bool step_open_ = false;  // gradients of this step have started to arrive
};

}  // namespace lft::engine
