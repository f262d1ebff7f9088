// The megatron engine: parameter placement, gradients, the distributed optimizer.
#include "lft/engine/megatron.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <stdexcept>

#include "lft/engine/megatron_internal.h"
#include "lft/engine/pipeline_schedule.h"
#include "lft/engine/run_plan.h"
#include "lft/comm/local_communicator.h"
#include "lft/model/families.h"
#include "lft/model/float8.h"
#include "lft/model/parameter_storage.h"
#include "lft/runtime/error.h"

namespace lft::engine {
MegatronEngine::MegatronEngine(const EngineContext& ctx)
    : no_replicas_(std::make_unique<LocalCommunicator>("dp_none", ctx.mesh.device())),
      tp_(ctx.mesh.device_comm(MeshDim::TP)),
      pp_(ctx.mesh.device_comm(MeshDim::PP)),
      dp_(ctx.mesh.device_dp_cp()),  // the dp ranks, and the cp ranks that share their parameters
      shard_(ctx.plan.parallel.megatron->distributed_optimizer ? dp_ : ctx.mesh.device_shard_cp()),
      replicate_(ctx.plan.parallel.megatron->distributed_optimizer ? *no_replicas_
                                                                   : ctx.mesh.device_comm(MeshDim::DPReplicate)),
      pp_host_(ctx.mesh.comm(MeshDim::PP)),
      stage_(ctx.mesh.coord(MeshDim::PP)),
      // Checked when the run plan was resolved, before the model is built or loaded.
      plan_(*ctx.plan.parallel.megatron),
      sharding_(ctx.plan.parallel.sharded),
      bucket_bytes_(ctx.plan.parallel.bucket_bytes) {
  if (ctx.plan.muon && plan_.tp > 1 && sharding_) {
    std::vector<MeshDim> dims = {MeshDim::TP, MeshDim::DPShard, MeshDim::CP};
    if (plan_.distributed_optimizer) dims.push_back(MeshDim::DPReplicate);
    tp_shard_ = ctx.mesh.make_device_group(dims, "tp_shard");
  }
}

MegatronEngine::~MegatronEngine() = default;

std::unique_ptr<Engine> create_megatron(const EngineContext& ctx) { return std::make_unique<MegatronEngine>(ctx); }

void MegatronEngine::prepare(model::CausalLM& model) {
  model_ = &model;
  model.set_parallel_ops(this);
  place_parameters();
  share_float8_scales();
  if (params_.empty()) return;  // a stage that trains nothing (fine-tuning)
  if (sharding_) {
    shard_data_parallel();
  } else if (dp_.size() > 1) {
    std::vector<at::Tensor> trained;
    for (const Param& p : params_) trained.push_back(p.tensor);
    dp_buckets_ = std::make_unique<GradientBuckets>(dp_, trained, bucket_bytes_, at::kFloat);
  }
}

void MegatronEngine::prepare_from(model::CausalLM& model, const model::WeightSource& weights) {
  weights_ = &weights;
  prepare(model);
  weights_ = nullptr;
}

// A float8 linear split over tp casts each shard with the whole tensor's scale: the weight's
// amax and, where those are split too, the row-parallel input's and the column-parallel output
// gradient's are agreed over tp (torchao's tensorwise scaling of DTensors does the same).
void MegatronEngine::share_float8_scales() {
  if (plan_.tp == 1) return;
  for (const auto& item : model_->named_modules()) {
    auto* linear = dynamic_cast<model::LinearImpl*>(item.value().get());
    if (linear == nullptr || !linear->float8) continue;
    const model::TpRole role = model_->placement(item.key() + ".weight").tp.role;
    if (role != model::TpRole::ColumnParallel && role != model::TpRole::RowParallel) continue;
    auto sharding = std::make_shared<model::Float8Sharding>();
    sharding->max_over_group = [this](const at::Tensor& amax) { tp_.all_reduce(amax, ReduceOp::Max); };
    sharding->input = role == model::TpRole::RowParallel;
    sharding->grad_output = role == model::TpRole::ColumnParallel;
    linear->float8_sharding = std::move(sharding);
  }
}

std::pair<std::int64_t, std::int64_t> MegatronEngine::chunk_units(int chunk) const {
  const int g = plan_.virtual_stage(stage_, chunk);
  const auto& [begin, end] = plan_.stage_layers[static_cast<std::size_t>(g)];
  // The first virtual stage also runs the embedding, the last one the head.
  return {g == 0 ? 0 : model::CausalLM::layer_unit(begin),
          g == plan_.last_virtual_stage() ? model_->num_units() : model::CausalLM::layer_unit(end)};
}

namespace {

// This rank's box of parameter `name` (whose tensor `p` has the global shape), read from `weights`:
// rows directly; a column range from whole rows, one parameter at a time.
at::Tensor read_box(const model::WeightSource& weights, const std::string& name, const at::Tensor& p,
                    const TpSlice& slice) {
  std::vector<std::int64_t> shape = p.sizes().vec();
  const auto options = p.options().requires_grad(false);
  if (slice.dim == 1) {
    at::Tensor whole = at::empty(shape, options);
    weights.read_rows(name, 0, shape[0], whole);
    return whole.narrow(1, slice.begin, slice.count).contiguous();
  }
  std::int64_t begin = 0;
  if (slice.dim == 0) {
    shape[0] = slice.count;
    begin = slice.begin;
  }
  at::Tensor box = at::empty(shape, options);
  weights.read_rows(name, begin, shape.empty() ? 1 : shape[0], box);
  return box;
}

}  // namespace

void MegatronEngine::place_parameters() {
  const int dp = dp_.size();
  c10::NoGradGuard no_grad;
  for (auto& item : model_->named_parameters()) {
    const std::string& name = item.key();
    at::Tensor& p = item.value();
    const model::ParameterPlacement placement = model_->placement(name);
    // The stages that use it: one, or two for an embedding tied to the head.
    std::vector<int> stages;
    for (std::int64_t unit : placement.units) {
      const int s = stage_of_unit(plan_, *model_, unit);
      if (std::find(stages.begin(), stages.end(), s) == stages.end()) stages.push_back(s);
    }
    std::sort(stages.begin(), stages.end());
    const auto mine = std::find(stages.begin(), stages.end(), stage_);
    if (mine == stages.end()) {
      p.set_data(at::empty({0}, p.options()));
      p.set_requires_grad(false);
      continue;
    }
    Param r;
    r.name = name;
    r.box.global_shape = p.sizes().vec();
    r.box.offset.assign(r.box.global_shape.size(), 0);
    const TpSlice slice = tp_slice(placement.tp, plan_.tp, tp_.rank());
    if (placement.tp.role == model::TpRole::VocabParallel && slice.dim == 0) vocab_begin_ = slice.begin;
    if (weights_ != nullptr) {
      p.set_data(read_box(*weights_, name, p, slice));
    } else if (slice.dim >= 0) {
      p.set_data(p.narrow(slice.dim, slice.begin, slice.count).clone());
    }
    if (!p.requires_grad()) continue;  // frozen (fine-tuning): this rank's box, never updated
    if (slice.dim >= 0) r.box.offset[static_cast<std::size_t>(slice.dim)] = slice.begin;
    const int pair = static_cast<int>(stages.size()), pair_index = static_cast<int>(mine - stages.begin());
    r.holders = pair * slice.holders;
    r.holder = pair_index * slice.holders + slice.holder;
    r.counted = r.holder == 0;
    // A replicated parameter's gradient is partial over tp when it acts on this rank's heads, or,
    // with sequence parallelism, on this rank's tokens.
    r.tp_partial_grad = plan_.tp > 1 && (placement.tp.role == model::TpRole::ReplicatedInsideTp ||
                                         (plan_.sequence_parallel && slice.dim < 0));
    r.kv_replica = slice.dim >= 0 && slice.holders > 1;
    r.tied_copy = pair > 1;
    if (pair > 2) throw std::logic_error("megatron: " + name + " is used on more than two pipeline stages");
    if (r.tied_copy) r.other_stage = stages[static_cast<std::size_t>(1 - pair_index)];
    r.box.replicas = r.holders * dp;
    r.box.replica = r.holder * dp + dp_.rank();
    r.tensor = p;
    params_.push_back(std::move(r));
  }
}

// The sharded engines' component over this rank's boxes: units by the model's layers (a stage
// holds only its own), the boxes cut again over the shard group.
void MegatronEngine::shard_data_parallel() {
  const ShardingPlan& plan = *sharding_;
  std::vector<DataParallelParameter> given;
  for (const Param& p : params_) {
    DataParallelParameter d;
    d.name = p.name;
    d.tensor = p.tensor;
    d.unit = sharded_unit_of(*model_, p.name);
    d.box = p.box;
    d.box.replicas = p.holders;  // the component adds its replicas
    d.box.replica = p.holder;
    given.push_back(std::move(d));
  }
  sharded_ = std::make_unique<ShardedDataParallel>(plan, shard_, replicate_);
  sharded_->prepare(*model_, std::move(given), nullptr, /*broadcast=*/false);
}

// ---- gradients ----

namespace {

at::Tensor grad_or_zeros(const at::Tensor& t) {
  return t.grad().defined() ? t.grad() : at::zeros_like(t);
}

void set_grad(at::Tensor t, const at::Tensor& g) { t.mutable_grad() = g; }

// All-reduces the gradients of `tensors` as one flat buffer over `comm`, on its device (the
// gradients may be in host memory: offloaded shards).
void all_reduce_grads(const std::vector<at::Tensor>& tensors, Communicator& comm) {
  if (tensors.empty() || comm.size() == 1) return;
  std::vector<at::Tensor> flat;
  for (const at::Tensor& t : tensors) flat.push_back(grad_or_zeros(t).reshape({-1}).to(at::kFloat));
  at::Tensor buffer = at::cat(flat).to(comm.device());
  comm.all_reduce(buffer);
  std::int64_t at = 0;
  for (const at::Tensor& t : tensors) {
    set_grad(t, buffer.narrow(0, at, t.numel()).view(t.sizes()).to(t.device(), t.scalar_type()));
    at += t.numel();
  }
}

}  // namespace

void MegatronEngine::sync_replicated_gradients(const std::vector<at::Tensor>& grads,
                                               const std::vector<std::int64_t>& rows) {
  c10::NoGradGuard no_grad;
  // Sequence-parallel norms: each tensor-parallel rank saw part of the sequence.
  std::vector<at::Tensor> partial;
  for (std::size_t i = 0; i < params_.size(); ++i)
    if (params_[i].tp_partial_grad) partial.push_back(grads[i]);
  all_reduce_grads(partial, tp_);
  // A kv head replicated on tp / kv ranks: its gradient is the sum of theirs. Each rank adds its
  // gradient into its head's slot of the whole tensor, and one all-reduce sums the slots.
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Param& p = params_[i];
    if (!p.kv_replica) continue;
    const at::Tensor& t = grads[i];
    at::Tensor whole = at::zeros(p.box.global_shape, t.options().dtype(at::kFloat).device(tp_.device()));
    whole.narrow(0, p.box.offset[0] + rows[i], t.size(0)).copy_(grad_or_zeros(t));
    tp_.all_reduce(whole);
    set_grad(t, whole.narrow(0, p.box.offset[0] + rows[i], t.size(0)).to(t.device(), t.scalar_type()));
  }
  // Tied embeddings on the first and the last stage: both take the sum.
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i].tied_copy) continue;
    const int other = params_[i].other_stage;
    const at::Tensor& t = grads[i];
    const at::Tensor mine = grad_or_zeros(t).to(pp_.device(), at::kFloat).contiguous();
    at::Tensor theirs = at::empty_like(mine);
    // Posted as one grouped pair: on NCCL an ungrouped send and receive between the same two
    // ranks deadlock once the tensor is larger than the transport's buffers.
    Communicator::SendRecv both = pp_.send_recv_async(mine, other, kTiedEmbeddingTag, theirs, other, kTiedEmbeddingTag);
    both.recv->wait();
    both.send->wait();
    set_grad(t, (mine + theirs).to(t.device(), t.scalar_type()));
  }
}

void MegatronEngine::finish_gradients() {
  // The sums over dp and over tp / the tied stages are linear: in either order the same sum.
  if (!sharded_) {
    if (dp_buckets_) dp_buckets_->finish();
    std::vector<at::Tensor> grads;
    for (const Param& p : params_) grads.push_back(p.tensor);
    sync_replicated_gradients(grads, std::vector<std::int64_t>(params_.size(), 0));
    return;
  }
  // Sharded: every box's pieces are cut alike on the tp replicas and the tied stages, so their
  // sums run on the pieces.
  sharded_->finish_gradients();
  std::vector<at::Tensor> grads(params_.size());
  std::vector<std::int64_t> rows(params_.size(), 0);
  for (std::size_t j = 0; j < sharded_->pieces().size(); ++j) {
    const std::size_t i = sharded_->piece_params()[j];
    grads[i] = sharded_->pieces()[j];
    if (!params_[i].box.offset.empty()) rows[i] = sharded_->boxes()[j].offset[0] - params_[i].box.offset[0];
  }
  sync_replicated_gradients(grads, rows);
}

at::Tensor MegatronEngine::grad_norm_squared() {
  std::vector<at::Tensor> counted;
  if (sharded_) {
    for (std::size_t j = 0; j < sharded_->pieces().size(); ++j)
      if (params_[sharded_->piece_params()[j]].counted) counted.push_back(sharded_->pieces()[j]);
  } else {
    for (const Param& p : params_)
      if (p.counted) counted.push_back(p.tensor);
  }
  at::Tensor total = local_grad_norm_squared(counted, tp_.device());
  tp_.all_reduce(total);
  pp_.all_reduce(total);
  if (plan_.dp_sharding != DpSharding::NoShard) shard_.all_reduce(total);
  return total;
}

void MegatronEngine::parameters_updated() {
  if (sharded_) sharded_->parameters_updated();
}

std::vector<at::Tensor> MegatronEngine::parameters() {
  if (sharded_) return sharded_->pieces();
  std::vector<at::Tensor> out;
  for (const Param& p : params_) out.push_back(p.tensor);
  return out;
}

std::vector<std::string> MegatronEngine::parameter_names() {
  if (sharded_) return sharded_->names();
  std::vector<std::string> out;
  for (const Param& p : params_) out.push_back(p.name);
  return out;
}

std::vector<TensorBox> MegatronEngine::parameter_boxes() {
  if (sharded_) return sharded_->boxes();
  std::vector<TensorBox> out;
  for (const Param& p : params_) out.push_back(p.box);
  return out;
}

Communicator* MegatronEngine::piece_group() {
  if (plan_.tp == 1) return sharded_ ? &shard_ : nullptr;
  if (!sharding_) return &tp_;
  if (!tp_shard_) throw std::logic_error("megatron: the tp x shard group is made for Muon runs only");
  return tp_shard_.get();
}

std::vector<Communicator*> MegatronEngine::communicators() const {
  std::vector<Communicator*> out = {&tp_, &pp_};
  if (sharded_) out.insert(out.end(), {&shard_, &replicate_});
  else out.push_back(&dp_);
  if (tp_shard_) out.push_back(tp_shard_.get());
  return out;
}

}  // namespace lft::engine
