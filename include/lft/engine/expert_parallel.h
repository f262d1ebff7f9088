// Expert parallelism on the engine's side (docs/engines.md, "Expert parallelism"): a data-parallel
// engine (ddp, fsdp, fsdp2, deepspeed) with each MoE layer's experts spread over the mesh's
// expert-parallel ranks ([mesh] ep, borrowed from dp x cp: device_mesh.h).
//
// The engine it wraps takes every parameter but the routed experts, as without ep: replicated or
// sharded over dp x cp. Each rank keeps its experts whole (E / ep of each layer, read from the
// starting weights by their global names), the ranks that hold the same experts (the
// expert-data-parallel group, dp x cp / ep of them) sum their gradients in buckets as ddp does,
// and the layers exchange rows over the expert-parallel group (model/expert_parallel.h). An
// expert's gradient on its rank already sums the rows of every rank of its ep group, so the sum
// over the edp group is the whole step's, as a replica's gradient after ddp's all-reduce. The
// gradient norm adds the experts' squares over the ep group to the wrapped engine's norm.
//
// Under megatron the ep groups lie inside a (pipeline stage, tensor-parallel rank) position: a rank
// keeps the experts of its stage's layers only, each cut to its tp rank's share as a dense MLP's
// (gate / up rows, down columns: the layer's tp exit sums the partial outputs), and the norm sums
// the experts' squares over ep, tp and pp.
//
// Under a sharding engine (fsdp, fsdp2, ZeRO 1-3, megatron's sharding strategies) with more than
// one rank in the edp group, the experts are the engine's other parameters over another group: the
// same component (ShardedDataParallel) with the same plan shards them over edp, each layer's
// experts a unit gathered and reduced beside the layer's own (as torchtitan's and FSDPTurbo's
// expert FSDP): under fsdp, fsdp2 and ZeRO-3 an edp rank keeps only its fp32 shard of its experts,
// gathers them for the layer's forward and backward and reduce-scatters their gradients; under
// ZeRO-1/2 it keeps them whole, reduce-scatters their gradients and gathers the updated shards.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lft/engine/engine.h"
#include "lft/engine/gradient_buckets.h"
#include "lft/engine/megatron_plan.h"
#include "lft/engine/sharded_data_parallel.h"
#include "lft/model/expert_parallel.h"

namespace lft::engine {

// ExpertExchange over a communicator: counts by all_to_all, rows by one uneven all_to_all
// (MPI_Ialltoallv on CPUs; on GPUs one NCCL group of a send and a receive per peer).
class CommExpertExchange final : public model::ExpertExchange {
 public:
  explicit CommExpertExchange(Communicator& comm) : comm_(comm) {}
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  at::Tensor exchange_counts(const at::Tensor& counts) const override;
  std::unique_ptr<model::RowsInFlight> post_rows(const at::Tensor& rows, const std::vector<std::int64_t>& send,
                                                 const std::vector<std::int64_t>& recv) const override;

 private:
  Communicator& comm_;
};

class ExpertParallelEngine final : public Engine {
 public:
  ExpertParallelEngine(const EngineContext& ctx, std::unique_ptr<Engine> inner);
  const char* name() const override { return inner_->name(); }
  void prepare(model::CausalLM& model) override;
  void prepare_from(model::CausalLM& model, const model::WeightSource& weights) override;
  bool reads_weight_shards() const override { return inner_->reads_weight_shards(); }
  void begin_micro_batch(bool sync) override { inner_->begin_micro_batch(sync); }
  // The wrapped engine's schedule (pipelines included); the experts' buckets expect one backward
  // pass per micro-batch, their gradients reduced after the last.
  at::Tensor run_micro_batches(model::CausalLM& model, const std::vector<MicroBatch>& batches,
                               const MicroBatchOptions& options) override;
  void finish_gradients() override;
  std::vector<at::Tensor> parameters() override;
  std::vector<std::string> parameter_names() override;
  std::vector<TensorBox> parameter_boxes() override;
  // The wrapped engine's: the experts (after its pieces) are no matrices of Muon's.
  Communicator* piece_group() override { return inner_->piece_group(); }
  void parameters_updated() override;
  at::Tensor grad_norm_squared() override;
  std::vector<Communicator*> communicators() const override;
  std::string summary(double steps, double step_seconds) override { return inner_->summary(steps, step_seconds); }

 private:
  // Takes each MoE layer's experts of this rank out of the model (the wrapped engine never sees
  // them); under megatron keeps those of this stage, with their tp slices.
  void place_experts(model::CausalLM& model);
  // Each kept expert's values: read from `weights` (null: its constructed values), cut to its slice.
  void set_values(const model::WeightSource* weights);
  void take_trained_experts();
  // Hands the experts to sharded_ (their values read from `weights` when given, else taken from
  // the tensors, broadcast first when `broadcast`).
  void shard_experts(model::CausalLM& model, const model::WeightSource* weights, bool broadcast);
  // Each kept expert's box in the global tensor (its tp slice's offset), held by `replicas` ranks.
  TensorBox box_of(std::size_t expert, int replicas, int replica) const;

  std::unique_ptr<Engine> inner_;
  Communicator& ep_;
  Communicator& edp_;
  double bucket_bytes_;
  std::shared_ptr<CommExpertExchange> exchange_;
  std::vector<std::pair<std::string, at::Tensor>> experts_;  // this rank's (frozen ones too), global names
  struct Held {
    std::vector<std::int64_t> global_shape;
    TpSlice slice;  // dim -1: whole
  };
  std::vector<Held> held_;  // per experts_ entry
  const MegatronPlan* megatron_ = nullptr;
  int stage_ = 0, tp_rank_ = 0;
  Communicator* tp_ = nullptr;
  Communicator* pp_ = nullptr;
  std::vector<std::string> trained_names_;
  std::vector<at::Tensor> trained_;
  std::vector<TensorBox> trained_boxes_;
  // The experts sharded over edp (see the top), with a group of one for its replicas and the
  // model's layer hooks calling the wrapped engine's and its own.
  std::unique_ptr<Communicator> no_replicas_;
  std::unique_ptr<ShardedDataParallel> sharded_;
  std::unique_ptr<model::LayerHooks> hooks_;
  // Otherwise the trained experts' gradients summed over edp in buckets (ddp's).
  std::unique_ptr<GradientBuckets> buckets_;
  bool backward_ = false;  // the step's micro-batches ran backward
};

}  // namespace lft::engine
