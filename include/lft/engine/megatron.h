// "megatron": tensor, sequence and pipeline parallelism with data parallelism on top, on the
// pp x dp_replicate x tp mesh (megatron_plan.h lays the model out; docs/engines.md).
//
//   tensor parallel   each rank keeps its box of every split parameter (by the role the model
//                     declares for it) and runs the model's own forward, which calls this
//                     engine's ParallelOps where its roles put them: copy_to_tp (or
//                     gather_sequence) entering a column-parallel region, reduce_from_tp (or
//                     scatter_sequence) leaving a row-parallel one, and the vocabulary split for
//                     the embedding and the loss (vocab_parallel_token_losses).
//   pipeline          stage s runs chunks c = 0..v-1, global virtual stage c * pp + s; the step's
//                     micro-batches run in the order pipeline_actions() gives, activations and
//                     their gradients sent point to point ([B, T(/tp), hidden] fp32).
//   data parallel     gradients all-reduced over the dp ranks in buckets (GradientBuckets, as
//                     ddp) while each parameter's last backward of the step runs; or, with a
//                     data_parallel_sharding_strategy, the sharded engines' component
//                     (ShardedDataParallel: ZeRO-1/2/3, HSDP) applied to this rank's boxes over
//                     dp_shard x cp, replicated over dp_replicate; use_distributed_optimizer is
//                     ZeRO-1 over every dp rank.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lft/engine/engine.h"
#include "lft/engine/gradient_buckets.h"
#include "lft/engine/megatron_plan.h"
#include "lft/engine/sharded_data_parallel.h"
#include "lft/model/causal_lm.h"
#include "lft/model/weight_source.h"

namespace lft::engine {

class MegatronEngine final : public Engine, private model::ParallelOps {
 public:
  explicit MegatronEngine(const EngineContext& ctx);
  ~MegatronEngine() override;
  const char* name() const override { return "megatron"; }
  void prepare(model::CausalLM& model) override;
  // Reads only this rank's boxes (rows, or the columns of whole rows for row-parallel weights)
  // into a model built without parameter memory.
  void prepare_from(model::CausalLM& model, const model::WeightSource& weights) override;
  bool reads_weight_shards() const override { return true; }
  void begin_micro_batch(bool) override {}
  at::Tensor run_micro_batches(model::CausalLM& model, const std::vector<MicroBatch>& batches,
                               const MicroBatchOptions& options) override;
  void finish_gradients() override;
  void parameters_updated() override;
  std::vector<at::Tensor> parameters() override;
  std::vector<std::string> parameter_names() override;
  std::vector<TensorBox> parameter_boxes() override;
  // tp's boxes (or without tp, the shard group's rows), over tp x the shard group with sharding.
  Communicator* piece_group() override;
  at::Tensor grad_norm_squared() override;
  std::vector<Communicator*> communicators() const override;
  // The pipeline's bubble: the time stages waited for activations and gradients, as a fraction
  // of the step time (mean over stages), beside the schedule's idle-slot fraction.
  std::string summary(double steps, double step_seconds) override;

  const MegatronPlan& plan() const { return plan_; }
  // The forward/backward micro-steps this stage ran in the last step, in order.
  const std::vector<PipelineAction>& executed() const { return executed_; }
  // The most micro-batch chunks whose activations this stage held at once in the last step.
  int peak_live_chunks() const { return peak_live_; }

 private:
  struct Param;

  // The model units of this stage's chunk `chunk`: [first, second).
  std::pair<std::int64_t, std::int64_t> chunk_units(int chunk) const;
  void place_parameters();
  void share_float8_scales();
  void shard_data_parallel();
  // One chunk's forward: the model's units of the chunk, from input_ids (virtual stage 0) or
  // `input`, to the loss (last virtual stage: returns micro_batch_loss * loss_factor and sets
  // `sequence_sums`) or to the activation it hands on.
  at::Tensor forward_chunk(int chunk, const MicroBatch& batch, const at::Tensor& input,
                           const MicroBatchOptions& options, at::Tensor& sequence_sums);
  // model::ParallelOps: the tensor-parallel communication the model's forward calls.
  at::Tensor enter(const at::Tensor& x) override;
  at::Tensor exit(const at::Tensor& y) override;
  at::Tensor embed(const at::Tensor& weight, const at::Tensor& input_ids) override;
  at::Tensor token_losses(const at::Tensor& logits, const at::Tensor& input_ids) override;
  at::Tensor target_losses(const at::Tensor& logits, const at::Tensor& targets) override;
  at::Tensor gather_positions(const at::Tensor& values) override;
  std::int64_t sequence_multiple() const override { return plan_.sequence_parallel ? plan_.tp : 1; }
  std::int64_t region_replicas() const override { return plan_.tp; }
  // The sums over tensor-parallel replicas and tied stages, on the gradients of `grads` (the
  // parameters, or with sharding the pieces), each `rows[i]` rows into its parameter's box.
  void sync_replicated_gradients(const std::vector<at::Tensor>& grads, const std::vector<std::int64_t>& rows);

  std::unique_ptr<Communicator> no_replicas_;  // a group of this rank alone
  Communicator& tp_;  // device communicators
  Communicator& pp_;
  Communicator& dp_;                // every data-parallel rank (dp_replicate x dp_shard x cp)
  Communicator& shard_;             // sharding strategies: dp_shard x cp (or every dp rank: use_distributed_optimizer)
  Communicator& replicate_;         // and dp_replicate (or no one)
  Communicator& pp_host_;  // host values along the pipeline (the summary's wait times)
  // A Muon run's group of the ranks holding pieces of this stage's parameters, when they are cut
  // over tp and again over the shard group (else piece_group() is one of those).
  std::unique_ptr<Communicator> tp_shard_;
  int stage_ = 0;
  MegatronPlan plan_;
  // The sharded component's policy when a sharding strategy is set (the parallel plan's: the
  // parameters gathered in the run's compute dtype with optim_grads_params).
  std::optional<ShardingPlan> sharding_;
  model::CausalLM* model_ = nullptr;
  std::int64_t vocab_begin_ = 0;  // the first vocabulary row this tensor-parallel rank holds
  std::vector<Param> params_;
  const model::WeightSource* weights_ = nullptr;  // during prepare_from
  std::vector<PipelineAction> executed_;
  int peak_live_ = 0;
  double pipeline_wait_seconds_ = 0.0;  // the host in point-to-point receives, over the run (MPI)
  // Sharded data parallelism over this rank's boxes; or, without it over dp > 1, the gradients
  // all-reduced in buckets during the last backward.
  std::unique_ptr<ShardedDataParallel> sharded_;
  double bucket_bytes_;
  std::unique_ptr<GradientBuckets> dp_buckets_;
};

std::unique_ptr<Engine> create_megatron(const EngineContext& ctx);

}  // namespace lft::engine
