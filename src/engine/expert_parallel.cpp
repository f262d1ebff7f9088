// Expert parallelism on the engine's side (expert_parallel.h).
#include "lft/engine/expert_parallel.h"

#include <c10/core/GradMode.h>

#include <ATen/ATen.h>

#include "lft/comm/local_communicator.h"
#include "lft/engine/run_plan.h"
#include "lft/model/causal_lm.h"
#include "lft/model/moe.h"
#include "lft/model/parameter_storage.h"
#include "lft/model/weight_source.h"

namespace lft::engine {

// ---- the exchange ----

at::Tensor CommExpertExchange::exchange_counts(const at::Tensor& counts) const {
  at::Tensor out = at::empty_like(counts);
  comm_.all_to_all(counts.contiguous(), out);
  return out;
}

namespace {

class CommRowsInFlight final : public model::RowsInFlight {
 public:
  CommRowsInFlight(at::Tensor out, WorkPtr work) : out_(std::move(out)), work_(std::move(work)) {}
  at::Tensor wait() override {
    if (work_) work_->wait();
    work_.reset();
    return out_;
  }

 private:
  at::Tensor out_;
  WorkPtr work_;
};

}  // namespace

std::unique_ptr<model::RowsInFlight> CommExpertExchange::post_rows(const at::Tensor& rows,
                                                                   const std::vector<std::int64_t>& send,
                                                                   const std::vector<std::int64_t>& recv) const {
  // One uneven all-to-all of whole rows (MPI_Ialltoallv; NCCL: a grouped send and receive per peer).
  std::int64_t width = 1;  // elements a row (from the shape: a rank may send no rows)
  for (std::int64_t d = 1; d < rows.dim(); ++d) width *= rows.size(d);
  std::vector<std::int64_t> send_elements, recv_elements;
  std::int64_t arriving = 0;
  for (std::size_t r = 0; r < send.size(); ++r) {
    send_elements.push_back(send[r] * width);
    recv_elements.push_back(recv[r] * width);
    arriving += recv[r];
  }
  std::vector<std::int64_t> shape = rows.sizes().vec();
  shape[0] = arriving;
  at::Tensor out = at::empty(shape, rows.options());
  return std::make_unique<CommRowsInFlight>(out, comm_.all_to_all_async(rows, out, send_elements, recv_elements));
}

// ---- the engine ----

namespace {

// The model's layer hooks when the experts are sharded: the wrapped engine's (null: none), then
// the experts' component's, around each layer.
class BothLayerHooks final : public model::LayerHooks {
 public:
  BothLayerHooks(model::LayerHooks* first, model::LayerHooks* second) : first_(first), second_(second) {}
  void before_layer(std::int64_t index) override {
    if (first_ != nullptr) first_->before_layer(index);
    second_->before_layer(index);
  }
  void after_layer(std::int64_t index, const at::Tensor& output) override {
    if (first_ != nullptr) first_->after_layer(index, output);
    second_->after_layer(index, output);
  }

 private:
  model::LayerHooks* first_;
  model::LayerHooks* second_;
};

}  // namespace

ExpertParallelEngine::ExpertParallelEngine(const EngineContext& ctx, std::unique_ptr<Engine> inner)
    : inner_(std::move(inner)),
      ep_(ctx.mesh.device_ep()),
      edp_(ctx.mesh.device_edp()),
      bucket_bytes_(ctx.plan.parallel.bucket_bytes),
      exchange_(std::make_shared<CommExpertExchange>(ep_)) {
  if (edp_.size() > 1 && ctx.plan.parallel.sharded) {
    ShardingPlan plan = *ctx.plan.parallel.sharded;
    plan.split_embedding_gradient = false;  // no embedding among the experts
    plan.float8_all_gather = false;         // nor float8 linears
    no_replicas_ = std::make_unique<LocalCommunicator>("edp_replicas", edp_.device());
    sharded_ = std::make_unique<ShardedDataParallel>(std::move(plan), edp_, *no_replicas_);
  }
  if (!ctx.plan.parallel.megatron) return;
  megatron_ = &*ctx.plan.parallel.megatron;
  stage_ = ctx.mesh.coord(MeshDim::PP);
  tp_rank_ = ctx.mesh.coord(MeshDim::TP);
  tp_ = &ctx.mesh.device_comm(MeshDim::TP);
  pp_ = &ctx.mesh.device_comm(MeshDim::PP);
}

void ExpertParallelEngine::place_experts(model::CausalLM& model) {
  for (auto& [name, tensor] : model::place_model_experts(model, exchange_)) {
    Held h{tensor.sizes().vec(), {}};
    if (megatron_ != nullptr) {
      const model::ParameterPlacement placement = model.placement(name);
      if (stage_of_unit(*megatron_, model, placement.units.front()) != stage_) {
        // Another stage's layer: nothing of it here (the layer does not run on this rank).
        c10::NoGradGuard no_grad;
        tensor.set_data(at::empty({0}, tensor.options()));
        tensor.set_requires_grad(false);
        continue;
      }
      h.slice = tp_slice(placement.tp, megatron_->tp, tp_rank_);
    }
    experts_.emplace_back(name, tensor);
    held_.push_back(std::move(h));
  }
}

void ExpertParallelEngine::set_values(const model::WeightSource* weights) {
  c10::NoGradGuard no_grad;
  for (std::size_t i = 0; i < experts_.size(); ++i) {
    auto& [name, tensor] = experts_[i];
    const TpSlice& slice = held_[i].slice;
    if (weights != nullptr) {
      // Only this rank's experts are read: with a sharding engine they were built without memory.
      model::allocate_storage(tensor);
      weights->read_rows(name, 0, tensor.size(0), tensor);
    }
    if (slice.dim >= 0) tensor.set_data(tensor.narrow(slice.dim, slice.begin, slice.count).clone());
  }
}

TensorBox ExpertParallelEngine::box_of(std::size_t expert, int replicas, int replica) const {
  const Held& h = held_[expert];
  TensorBox box{h.global_shape, std::vector<std::int64_t>(h.global_shape.size(), 0), replicas, replica};
  if (h.slice.dim >= 0) box.offset[static_cast<std::size_t>(h.slice.dim)] = h.slice.begin;
  return box;
}

void ExpertParallelEngine::take_trained_experts() {
  for (std::size_t i = 0; i < experts_.size(); ++i) {
    const auto& [name, tensor] = experts_[i];
    if (!tensor.requires_grad()) continue;
    trained_names_.push_back(name);
    trained_.push_back(tensor);
    trained_boxes_.push_back(box_of(i, edp_.size(), edp_.rank()));
  }
  if (!trained_.empty()) buckets_ = std::make_unique<GradientBuckets>(edp_, trained_, bucket_bytes_);
}

void ExpertParallelEngine::shard_experts(model::CausalLM& model, const model::WeightSource* weights, bool broadcast) {
  // Frozen experts too when parameters are sharded (as the engine's own frozen parameters); else
  // they stay whole in the layers.
  std::vector<DataParallelParameter> params;
  for (std::size_t i = 0; i < experts_.size(); ++i) {
    const auto& [name, tensor] = experts_[i];
    if (!tensor.requires_grad() && !sharded_->plan().shard_parameters) continue;
    params.push_back({name, tensor, sharded_unit_of(model, name), box_of(i, 1, 0)});
  }
  if (params.empty()) {  // nothing to shard: every expert frozen and kept whole
    sharded_.reset();
    return;
  }
  model::LayerHooks* engines = model.layer_hooks();
  sharded_->prepare(model, std::move(params), weights, broadcast);
  hooks_ = std::make_unique<BothLayerHooks>(engines, sharded_.get());
  model.set_layer_hooks(hooks_.get());
}

void ExpertParallelEngine::prepare(model::CausalLM& model) {
  place_experts(model);
  inner_->prepare(model);
  set_values(nullptr);
  {
    // Equal by construction on the ranks that hold them; this makes it so (as ddp does).
    c10::NoGradGuard no_grad;
    for (auto& [name, tensor] : experts_) edp_.broadcast(tensor, 0);
  }
  if (sharded_) shard_experts(model, nullptr, /*broadcast=*/false);
  else take_trained_experts();
}

void ExpertParallelEngine::prepare_from(model::CausalLM& model, const model::WeightSource& weights) {
  place_experts(model);
  inner_->prepare_from(model, weights);
  // Each edp rank reads only its shards where the engine keeps only shards and the experts are
  // whole tensors of the files (not megatron's tp slices).
  if (sharded_ && sharded_->plan().shard_parameters && megatron_ == nullptr) {
    shard_experts(model, &weights, /*broadcast=*/false);
    return;
  }
  set_values(&weights);
  if (sharded_) shard_experts(model, nullptr, /*broadcast=*/false);
  else take_trained_experts();
}

at::Tensor ExpertParallelEngine::run_micro_batches(model::CausalLM& model, const std::vector<MicroBatch>& batches,
                                                   const MicroBatchOptions& options) {
  backward_ = options.backward;
  const int passes = options.backward ? static_cast<int>(batches.size()) : 0;
  if (sharded_ && passes > 0) sharded_->expect_backwards(passes);
  if (buckets_) buckets_->expect_backwards(passes);
  return inner_->run_micro_batches(model, batches, options);
}

void ExpertParallelEngine::finish_gradients() {
  inner_->finish_gradients();
  if (!backward_) return;
  if (sharded_) sharded_->finish_gradients();
  if (buckets_) buckets_->finish();
}

void ExpertParallelEngine::parameters_updated() {
  inner_->parameters_updated();
  if (sharded_) sharded_->parameters_updated();
}

std::vector<at::Tensor> ExpertParallelEngine::parameters() {
  std::vector<at::Tensor> out = inner_->parameters();
  const std::vector<at::Tensor>& experts = sharded_ ? sharded_->pieces() : trained_;
  out.insert(out.end(), experts.begin(), experts.end());
  return out;
}

std::vector<std::string> ExpertParallelEngine::parameter_names() {
  std::vector<std::string> out = inner_->parameter_names();
  const std::vector<std::string>& experts = sharded_ ? sharded_->names() : trained_names_;
  out.insert(out.end(), experts.begin(), experts.end());
  return out;
}

std::vector<TensorBox> ExpertParallelEngine::parameter_boxes() {
  std::vector<TensorBox> out = inner_->parameter_boxes();
  const std::vector<TensorBox>& experts = sharded_ ? sharded_->boxes() : trained_boxes_;
  out.insert(out.end(), experts.begin(), experts.end());
  return out;
}

at::Tensor ExpertParallelEngine::grad_norm_squared() {
  at::Tensor norm = inner_->grad_norm_squared();
  // Sharded, each edp rank holds other rows of the experts' gradients.
  at::Tensor experts = local_grad_norm_squared(sharded_ ? sharded_->pieces() : trained_, ep_.device());
  // Each rank of the ep group holds other experts; under megatron each tp rank other slices of
  // them and each stage other layers'.
  for (Communicator* group : {sharded_ ? &edp_ : nullptr, &ep_, tp_, pp_})
    if (group != nullptr && group->size() > 1) group->all_reduce(experts, ReduceOp::Sum);
  return norm + experts.to(norm.device());
}

std::vector<Communicator*> ExpertParallelEngine::communicators() const {
  std::vector<Communicator*> out = inner_->communicators();
  out.push_back(&ep_);
  if (edp_.size() > 1) out.push_back(&edp_);
  return out;
}

}  // namespace lft::engine
