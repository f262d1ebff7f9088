#include "lft/engine/sharded_data_parallel.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/core/TensorImpl.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <map>
#include <optional>
#include <stdexcept>

#include "lft/comm/device_read.h"
#include "lft/engine/shard_copy.h"
#include "lft/model/float8.h"
#include "lft/model/parameter_storage.h"
#include "lft/model/weight_source.h"
#include "lft/runtime/side_stream.h"

namespace lft::engine {
namespace {

std::int64_t rows_of(const Shape& s) { return s.empty() ? 1 : s[0]; }

}  // namespace

std::size_t sharded_unit_of(const model::CausalLM& model, const std::string& name) {
  const std::int64_t unit = model.placement(name).units.front();
  return model.is_layer_unit(unit) ? static_cast<std::size_t>(unit) : 0;
}

struct ShardedDataParallel::Unit {
  std::vector<std::size_t> params;   // indices into params_
  std::vector<std::size_t> trained;  // the positions in `params` of those that train
  std::vector<std::size_t> pieces;   // per trained parameter: index into pieces_
  UnitLayout layout;       // every parameter of the unit (what is gathered)
  UnitLayout grad_layout;  // the trained ones (what is reduced)
  at::Tensor master;  // [layout.shard_numel] fp32: this rank's shard
  at::Tensor grad;    // [grad_layout.shard_numel] fp32: reduced gradient shard, summed over micro-batches
  bool gathered = true;
  at::Tensor gather_in, gather_out;
  WorkPtr gather;
  // float8 all-gather: the positions in `params` of float8 linears' weights and of the others,
  // each with its layout; the e4m3 bytes in flight and each weight's inverse scale.
  std::vector<std::size_t> f8, rest;
  UnitLayout f8_layout, rest_layout;
  at::Tensor gather8_in, gather8_out;
  std::vector<at::Tensor> f8_inv_scale;
  WorkPtr gather8;
  at::Tensor reduce_in, reduce_out;
  WorkPtr reduce;
  // The positions in `trained` whose gradients are reduce-scattered (all but an untied split
  // embedding's, whose rows come sparse), cut as in grad_layout and packed in reduce_layout.
  std::vector<std::size_t> reduced;
  UnitLayout reduce_layout;
  std::size_t dense = 0;    // gradients that reach the reduce-scatter in each backward pass
  std::size_t pending = 0;  // of those, still to arrive in this backward pass
  int passes_left = 0;      // backward passes of this step still to come, this one included
  // Frozen bytes (shard_bytes): their tensors, this rank's share of their concatenation
  // (ceil(total / ranks) bytes, zero-padded at the end), and the gather of every rank's share.
  std::vector<at::Tensor> bytes;
  at::Tensor bytes_shard, bytes_out;
  WorkPtr bytes_gather;
  // split: the frozen parameters' shards kept apart in the compute dtype (frozen_master, cut as
  // frozen_layout), `master` then holding the trained ones only (cut as grad_layout).
  bool split = false;
  std::vector<std::size_t> frozen;  // their positions in `params`
  UnitLayout frozen_layout;
  at::Tensor frozen_master;
};

class ShardedDataParallel::GradReadyHook final : public torch::autograd::PostAccumulateGradHook {
 public:
  GradReadyHook(ShardedDataParallel* owner, std::size_t param) : owner_(owner), param_(param) {}
  void operator()(const torch::autograd::Variable&) override { owner_->on_gradient_ready(param_); }

 private:
  ShardedDataParallel* owner_;
  std::size_t param_;
};

class ShardedDataParallel::HeadReadyHook final : public torch::autograd::PostAccumulateGradHook {
 public:
  explicit HeadReadyHook(ShardedDataParallel* owner) : owner_(owner) {}
  void operator()(const torch::autograd::Variable&) override { owner_->on_gradient_ready(kNone); }

 private:
  ShardedDataParallel* owner_;
};

ShardedDataParallel::ShardedDataParallel(ShardingPlan plan, Communicator& shard, Communicator& replicate)
    : plan_(std::move(plan)), shard_comm_(shard), replicate_comm_(replicate) {}

ShardedDataParallel::~ShardedDataParallel() = default;

void ShardedDataParallel::prepare(model::CausalLM& model, std::vector<DataParallelParameter> params,
                                  const model::WeightSource* weights, bool broadcast,
                                  std::vector<DataParallelBytes> bytes) {
  if (params.empty()) throw std::logic_error("ShardedDataParallel: no parameters to shard");
  weights_ = weights;
  build_units(model, params, broadcast);
  weights_ = nullptr;
  if (plan_.shard_parameters) {
    c10::NoGradGuard no_grad;
    for (auto& p : params_) {
      if (p.scalar_type() == plan_.compute_dtype) continue;
      const auto options = p.options().dtype(plan_.compute_dtype);
      p.set_data(model::storage_allocated(p) ? p.to(options) : model::unallocated_tensor(p.sizes().vec(), options));
    }
    shard_bytes(bytes);
    for (auto& u : units_) free_parameters(*u);
  }
  split_embedding(model);
  // ZeRO-1/2 too: the layer hooks wait for a unit's updated parameters just before its forward.
  model.set_layer_hooks(this);
  for (std::size_t k = 0; k < params_.size(); ++k)
    if (params_[k].requires_grad())
      torch::autograd::impl::set_post_acc_grad_hooks(params_[k], std::make_unique<GradReadyHook>(this, k));
  after_forward_.assign(static_cast<std::size_t>(model.config().num_hidden_layers), 0);
}

void ShardedDataParallel::build_units(model::CausalLM& model, const std::vector<DataParallelParameter>& given,
                                      bool broadcast) {
  // Every unit of the model, those with nothing given here empty (megatron: other stages' layers,
  // frozen ones).
  for (std::int64_t u = 0; u <= model.num_layers(); ++u) units_.push_back(std::make_unique<Unit>());
  for (const DataParallelParameter& p : given) {
    params_.push_back(p.tensor);
    shapes_.push_back(p.tensor.sizes().vec());
    unit_of_.push_back(p.unit);
  }
  if (plan_.float8_all_gather) {
    std::map<std::string, model::LinearImpl*> float8_weights;
    for (const auto& item : model.named_modules())
      if (auto* linear = dynamic_cast<model::LinearImpl*>(item.value().get()); linear && linear->float8)
        float8_weights[item.key() + ".weight"] = linear;
    for (const DataParallelParameter& p : given)
      float8_linear_.push_back(float8_weights.count(p.name) ? float8_weights.at(p.name) : nullptr);
  } else {
    float8_linear_.assign(params_.size(), nullptr);
  }
  c10::NoGradGuard no_grad;
  if (broadcast && weights_ == nullptr) {
    for (auto& p : params_) {
      shard_comm_.broadcast(p, 0);
      replicate_comm_.broadcast(p, 0);
    }
  }
  for (std::size_t k = 0; k < params_.size(); ++k) units_[unit_of_[k]]->params.push_back(k);
  const int ranks = shard_comm_.size(), me = shard_comm_.rank();
  const auto f32 = params_.front().options().dtype(at::kFloat);
  const bool pin = plan_.offload && plan_.pin_memory && shard_comm_.device().is_cuda();
  const auto master_options = plan_.offload ? at::TensorOptions().dtype(at::kFloat).pinned_memory(pin) : f32;
  for (auto& u : units_) {
    std::vector<Shape> shapes;
    for (std::size_t i = 0; i < u->params.size(); ++i) {
      shapes.push_back(shapes_[u->params[i]]);
      if (params_[u->params[i]].requires_grad()) u->trained.push_back(i);
    }
    u->layout = plan_.per_parameter_cut ? per_parameter_layout(shapes, ranks) : flat_layout(shapes, ranks);
    u->grad_layout = sub_layout(u->layout, u->trained, shapes);
    for (std::size_t j = 0; j < u->trained.size(); ++j) u->reduced.push_back(j);
    u->reduce_layout = u->grad_layout;
    u->dense = u->trained.size();
    for (std::size_t i = 0; i < u->params.size(); ++i) (float8_linear_[u->params[i]] ? u->f8 : u->rest).push_back(i);
    u->f8_layout = sub_layout(u->layout, u->f8, shapes);
    u->rest_layout = sub_layout(u->layout, u->rest, shapes);
    // Frozen parameters are only ever gathered in the compute dtype: with a 16-bit one their
    // shards are kept in it (the same values, cast once instead of at every gather; LoRA's frozen
    // base in half the bytes), apart from the trained ones' fp32 master.
    u->split = plan_.shard_parameters && plan_.compute_dtype != at::kFloat && !plan_.offload && u->f8.empty() &&
               u->trained.size() < u->params.size();
    if (u->split) {
      for (std::size_t i = 0; i < u->params.size(); ++i)
        if (!params_[u->params[i]].requires_grad()) u->frozen.push_back(i);
      // A unit that trains nothing keeps its frozen shard cut as the unit (what the gather sends).
      u->frozen_layout = u->trained.empty() ? u->layout : sub_layout(u->layout, u->frozen, shapes);
      u->frozen_master = at::zeros({u->frozen_layout.shard_numel}, f32.dtype(plan_.compute_dtype));
    }
    u->master = at::zeros({(u->split ? u->grad_layout : u->layout).shard_numel}, master_options);
    u->grad = at::zeros({u->grad_layout.shard_numel}, master_options);
    for (std::size_t i = 0; i < u->params.size(); ++i) {
      const std::size_t k = u->params[i];
      const ShardPiece& piece = u->layout.pieces[static_cast<std::size_t>(me)][i];
      at::Tensor view = master_view(*u, i);
      if (weights_ != nullptr) weights_->read_rows(given[k].name, piece.row_begin, piece.rows, view);
      else view.copy_(params_[k].narrow(0, piece.row_begin, piece.rows));
      if (!params_[k].requires_grad()) continue;
      u->pieces.push_back(pieces_.size());
      pieces_.push_back(view);
      names_.push_back(given[k].name);
      piece_params_.push_back(k);
      // The piece's box: rows of this rank's box, held by every replica of it.
      TensorBox box = given[k].box;
      if (!box.offset.empty()) box.offset[0] += piece.row_begin;
      box.replicas = given[k].box.replicas * replicate_comm_.size();
      box.replica = given[k].box.replica * replicate_comm_.size() + replicate_comm_.rank();
      boxes_.push_back(box);
    }
  }
}

void ShardedDataParallel::shard_bytes(const std::vector<DataParallelBytes>& bytes) {
  for (const DataParallelBytes& b : bytes) {
    const at::Tensor& t = b.tensor;
    if (!t.is_contiguous() || t.storage_offset() != 0 ||
        t.storage().nbytes() != static_cast<std::size_t>(t.numel()) * t.element_size())
      throw std::logic_error("ShardedDataParallel: frozen bytes '" + b.name + "' are not the whole of their storage");
    Unit& u = *units_.at(b.unit);
    // Gathered and freed with the unit's parameters (QLoRA: its norms, frozen and sharded too).
    if (u.params.empty()) throw std::logic_error("ShardedDataParallel: frozen bytes '" + b.name + "' in a unit without parameters");
    u.bytes.push_back(t);
  }
  const std::int64_t ranks = shard_comm_.size(), me = shard_comm_.rank();
  for (auto& u : units_) {
    if (u->bytes.empty()) continue;
    std::int64_t total = 0;
    for (const at::Tensor& t : u->bytes) total += t.numel() * static_cast<std::int64_t>(t.element_size());
    const std::int64_t share = (total + ranks - 1) / ranks, begin = std::min(total, me * share),
                       end = std::min(total, begin + share);
    u->bytes_shard = at::zeros({share}, u->bytes.front().options().dtype(at::kByte));
    std::int64_t offset = 0;  // of each tensor in the concatenation
    for (const at::Tensor& t : u->bytes) {
      const std::int64_t n = t.numel() * static_cast<std::int64_t>(t.element_size());
      const std::int64_t from = std::max(begin, offset), to = std::min(end, offset + n);
      if (from < to)
        u->bytes_shard.narrow(0, from - begin, to - from).copy_(t.reshape({-1}).view(at::kByte).narrow(0, from - offset, to - from));
      offset += n;
    }
  }
}

// ---- gathering whole parameters ----
//
// A parameter keeps its tensor and its storage object for the whole run; freeing releases the
// storage's memory and gathering allocates it again. Autograd saves a layer's weights by
// reference to that storage, so a freed layer holds no memory between its forward and its
// backward, and the gathered values are what its backward reads (FSDP's storage resize).
// Gathered values are written through an alias of the storage with its own version counter,
// so autograd does not see an in-place change of a saved tensor.

namespace {

at::Tensor storage_alias(const at::Tensor& param) {
  at::Tensor alias = at::empty({0}, param.options().requires_grad(false));
  alias.set_(param.storage(), param.storage_offset(), param.sizes(), param.strides());
  return alias;
}

}  // namespace

at::Tensor ShardedDataParallel::master_view(const Unit& u, std::size_t i) const {
  const auto me = static_cast<std::size_t>(shard_comm_.rank());
  const Shape& shape = shapes_[u.params[i]];
  if (!u.split) return piece_in(u.master, 0, u.layout.pieces[me][i], shape);
  const auto trained = std::lower_bound(u.trained.begin(), u.trained.end(), i);
  if (trained != u.trained.end() && *trained == i)
    return piece_in(u.master, 0, u.grad_layout.pieces[me][static_cast<std::size_t>(trained - u.trained.begin())], shape);
  const auto frozen = std::lower_bound(u.frozen.begin(), u.frozen.end(), i);
  return piece_in(u.frozen_master, 0, u.frozen_layout.pieces[me][static_cast<std::size_t>(frozen - u.frozen.begin())], shape);
}

at::Tensor ShardedDataParallel::assembled_shard(const Unit& u, at::ScalarType dtype) const {
  c10::NoGradGuard no_grad;
  if (u.trained.empty()) return u.frozen_master.to(dtype);  // cut as the unit already: no copy
  const auto me = static_cast<std::size_t>(shard_comm_.rank());
  at::Tensor shard = at::zeros({u.layout.shard_numel}, u.master.options().dtype(dtype));
  for (std::size_t i = 0; i < u.params.size(); ++i)
    piece_in(shard, 0, u.layout.pieces[me][i], shapes_[u.params[i]]).copy_(master_view(u, i));
  return shard;
}

at::Tensor ShardedDataParallel::to_device(const at::Tensor& host, at::ScalarType dtype) const {
  if (!plan_.offload) return host.to(dtype).contiguous();
  // Copied as it is (from pinned memory without blocking the host), then converted on the device:
  // a copy that also changes the dtype converts on the CPU into pageable memory first, which
  // blocks the host and leaves the pinned buffer and the side stream's overlap unused.
  return host.to(host.options().device(shard_comm_.device()).pinned_memory(false), /*non_blocking=*/host.is_pinned(),
                 /*copy=*/true)
      .to(dtype);
}

void ShardedDataParallel::launch_gather(Unit& u) {
  if (!u.bytes.empty()) {
    u.bytes_out = at::empty({u.bytes_shard.numel() * shard_comm_.size()}, u.bytes_shard.options());
    u.bytes_gather = shard_comm_.all_gather_async(u.bytes_shard, u.bytes_out);
  }
  const at::ScalarType dtype = plan_.shard_parameters ? plan_.compute_dtype : at::kFloat;
  if (u.f8.empty()) {
    // Allocated for the compute stream, which reads it after the gather.
    u.gather_out = at::empty({u.layout.shard_numel * shard_comm_.size()},
                             u.master.options().dtype(dtype).device(shard_comm_.device()).pinned_memory(false));
    // Offload on a GPU: the shard's copy to the device overlaps compute, and the all-gather
    // waits for it (it is posted from the side stream).
    const SideStreamScope side(plan_.offload ? shard_comm_.device() : at::Device(at::kCPU));
    u.gather_in = u.split ? assembled_shard(u, dtype) : to_device(u.master, dtype);
    u.gather = shard_comm_.all_gather_async(u.gather_in, u.gather_out);
    return;
  }
  c10::NoGradGuard no_grad;
  const std::size_t me = static_cast<std::size_t>(shard_comm_.rank());
  u.gather_in = at::zeros({u.rest_layout.shard_numel}, u.master.options().dtype(dtype));
  for (std::size_t j = 0; j < u.rest.size(); ++j)
    piece_in(u.gather_in, 0, u.rest_layout.pieces[me][j], shapes_[u.params[u.rest[j]]]).copy_(master_view(u, u.rest[j]));
  u.gather_out = at::empty({u.rest_layout.shard_numel * shard_comm_.size()}, u.gather_in.options());
  u.gather = shard_comm_.all_gather_async(u.gather_in, u.gather_out);
  // Each weight's amax over every rank's shard: the scale the whole weight gets.
  at::Tensor amax = at::zeros({static_cast<std::int64_t>(u.f8.size())}, u.master.options());
  for (std::size_t j = 0; j < u.f8.size(); ++j) {
    const at::Tensor piece = master_view(u, u.f8[j]);
    if (piece.numel() > 0) amax[static_cast<std::int64_t>(j)] = piece.abs().max();
  }
  shard_comm_.all_reduce(amax, ReduceOp::Max);
  // Megatron: weights split over tp are cast with the whole tensor's scale, the amax agreed over
  // tp as the linears agree it themselves (float8.h); a replicated one's is its own on every rank.
  for (const std::size_t i : u.f8)
    if (const auto& tp = float8_linear_[u.params[i]]->float8_sharding) {
      tp->max_over_group(amax);
      break;
    }
  u.gather8_in = at::zeros({u.f8_layout.shard_numel}, u.master.options().dtype(at::kByte));
  u.f8_inv_scale.clear();
  for (std::size_t j = 0; j < u.f8.size(); ++j) {
    const model::Float8Tensor q = model::to_float8(master_view(u, u.f8[j]), at::kFloat8_e4m3fn, amax[static_cast<std::int64_t>(j)]);
    u.gather8_in.narrow(0, u.f8_layout.pieces[me][j].local_offset, q.data.numel()).copy_(q.data.reshape({-1}).view(at::kByte));
    u.f8_inv_scale.push_back(q.inv_scale);
  }
  u.gather8_out = at::empty({u.f8_layout.shard_numel * shard_comm_.size()}, u.gather8_in.options());
  u.gather8 = shard_comm_.all_gather_async(u.gather8_in, u.gather8_out);
}

void ShardedDataParallel::finish_gather(Unit& u) {
  u.gather->wait();
  if (u.gather8) u.gather8->wait();
  if (u.bytes_gather) u.bytes_gather->wait();
  u.gather.reset();
  u.gather8.reset();
  u.bytes_gather.reset();
  c10::NoGradGuard no_grad;
  std::int64_t offset = 0;
  for (const at::Tensor& t : u.bytes) {
    model::allocate_storage(t);
    const at::Tensor whole = storage_alias(t).reshape({-1}).view(at::kByte);
    whole.copy_(u.bytes_out.narrow(0, offset, whole.numel()));
    offset += whole.numel();
  }
  u.bytes_out.reset();
  const bool float8 = !u.f8.empty();  // the float8 weights came apart (below)
  const UnitLayout& layout = float8 ? u.rest_layout : u.layout;
  for (std::size_t j = 0; j < (float8 ? u.rest.size() : u.params.size()); ++j) {
    const std::size_t i = float8 ? u.rest[j] : j;
    at::Tensor& param = params_[u.params[i]];
    if (plan_.shard_parameters) model::allocate_storage(param);
    gather_rows(layout, j, shapes_[u.params[i]], u.gather_out, storage_alias(param));
  }
  // float8 weights: assembled as e4m3 and handed to their linear; the parameter holds no memory.
  for (std::size_t j = 0; j < u.f8.size(); ++j) {
    const Shape& shape = shapes_[u.params[u.f8[j]]];
    at::Tensor whole = at::empty(shape, u.gather8_out.options());
    gather_rows(u.f8_layout, j, shape, u.gather8_out, whole);
    model::LinearImpl* linear = float8_linear_[u.params[u.f8[j]]];
    linear->float8_weight = whole.view(at::kFloat8_e4m3fn);
    linear->float8_weight_inv_scale = u.f8_inv_scale[j];
  }
  u.gather_in.reset();
  u.gather_out.reset();
  u.gather8_in.reset();
  u.gather8_out.reset();
  u.gathered = true;
}

void ShardedDataParallel::ensure_gathered(Unit& u) {
  if (u.gathered || u.params.empty()) return;
  if (!u.gather) launch_gather(u);
  finish_gather(u);
}

void ShardedDataParallel::prefetch(std::size_t unit) {
  if (unit >= units_.size()) return;
  Unit& u = *units_[unit];
  if (!u.gathered && !u.gather && !u.params.empty()) launch_gather(u);
}

void ShardedDataParallel::free_parameters(Unit& u) {
  if (u.params.empty()) return;
  for (std::size_t k : u.params) model::release_storage(params_[k]);
  for (const at::Tensor& t : u.bytes) model::release_storage(t);
  for (std::size_t i : u.f8) {
    model::LinearImpl* linear = float8_linear_[u.params[i]];
    linear->float8_weight.reset();
    linear->float8_weight_inv_scale.reset();
  }
  u.gathered = false;
}

void ShardedDataParallel::before_layer(std::int64_t index) {
  const auto unit = static_cast<std::size_t>(model::CausalLM::layer_unit(index));
  ensure_gathered(*units_[unit]);
  prefetch(unit + 1);
}

void ShardedDataParallel::after_layer(std::int64_t index, const at::Tensor& output) {
  const auto unit = static_cast<std::size_t>(model::CausalLM::layer_unit(index));
  if (plan_.shard_parameters) {
    if (plan_.reshard_after_forward) free_parameters(*units_[unit]);
    // Before this layer's backward: gather it again (a freed layer, or one whose backward in an
    // earlier pass of a pipeline freed it), and prefetch the layer before it.
    if (output.requires_grad())
      output.register_hook([this, unit](const at::Tensor&) {
        // The gradient of this layer's output is complete: the next layer's backward is done.
        if (plan_.reshard_after_forward && unit + 1 < units_.size() && units_[unit + 1]->gathered &&
            !units_[unit + 1]->gather)
          free_parameters(*units_[unit + 1]);
        ensure_gathered(*units_[unit]);
        // Not the root: gather_root / begin_micro_batch gather it before each pass, and a root
        // freed during this backward (its gradients came first) is not used again in it.
        if (unit > 1) prefetch(unit - 1);
      });
  }
  std::int64_t held = 0;
  for (std::size_t k : units_[unit]->params) held += static_cast<std::int64_t>(params_[k].storage().nbytes());
  for (const at::Tensor& t : units_[unit]->bytes) held += static_cast<std::int64_t>(t.storage().nbytes());
  after_forward_[static_cast<std::size_t>(index)] = held;
}

// ---- reducing gradients ----

void ShardedDataParallel::on_gradient_ready(std::size_t param) {
  if (param == embedding_) {
    reduce_embedding_rows();
    return;
  }
  Unit& u = *units_[unit_of_[param == kNone ? embedding_ : param]];  // kNone: the tied head
  if (u.pending == 0 || --u.pending > 0) return;
  // The unit's backward pass is complete.
  --u.passes_left;
  if (plan_.reduce_during_backward || u.passes_left == 0) launch_reduce(u);
  u.pending = u.passes_left > 0 ? u.dense : 0;
}

std::size_t ShardedDataParallel::embedding_slot(const Unit& u) const {
  for (std::size_t j = 0; j < u.trained.size(); ++j)
    if (u.params[u.trained[j]] == embedding_) return j;
  throw std::logic_error("ShardedDataParallel: the embedding is not in its unit");
}

at::Tensor& ShardedDataParallel::dense_owner(std::size_t param) {
  return param == embedding_ ? tied_head_ : params_[param];
}

void ShardedDataParallel::split_embedding(model::CausalLM& model) {
  if (!plan_.split_embedding_gradient) return;
  const at::Tensor& weight = model.model->embed_tokens->weight;
  if (!weight.requires_grad()) return;  // frozen: no gradient to split
  for (std::size_t k = 0; k < params_.size(); ++k)
    if (params_[k].is_same(weight)) embedding_ = k;
  if (embedding_ == kNone) return;
  Unit& u = *units_[unit_of_[embedding_]];
  if (model.config().tie_word_embeddings) {
    // The head's own leaf over the embedding's storage object, gathered and freed with it (made
    // without set_, which would allocate a freed storage).
    tied_head_ = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(weight.storage()), weight.key_set(), weight.dtype());
    tied_head_.unsafeGetTensorImpl()->set_sizes_contiguous(weight.sizes());
    tied_head_.set_requires_grad(true);
    torch::autograd::impl::set_post_acc_grad_hooks(tied_head_, std::make_unique<HeadReadyHook>(this));
  } else {
    // The embedding's rows never reach the reduce-scatter.
    std::vector<Shape> shapes;
    for (std::size_t i : u.trained) shapes.push_back(shapes_[u.params[i]]);
    u.reduced.erase(std::find(u.reduced.begin(), u.reduced.end(), embedding_slot(u)));
    u.reduce_layout = sub_layout(u.grad_layout, u.reduced, shapes);
    u.dense = u.reduced.size();
  }
  model.split_embedding_gradient(tied_head_);
}

void ShardedDataParallel::reduce_embedding_rows() {
  c10::NoGradGuard no_grad;
  at::Tensor& param = params_[embedding_];
  const at::Tensor grad = param.grad();
  param.mutable_grad().reset();
  if (!grad.is_sparse()) throw std::logic_error("ShardedDataParallel: the embedding's gradient is not sparse");
  const Shape& shape = shapes_[embedding_];
  const std::int64_t width = row_numel(shape);
  const at::Tensor rows = grad._indices().reshape({-1}).contiguous();
  const at::Tensor values = grad._values().to(at::kFloat).contiguous().reshape({-1});
  // Every rank's rows: their counts, then the row indices and values in rank order.
  const int ranks = shard_comm_.size();
  const at::Tensor count = at::full({1}, rows.numel(), rows.options());
  at::Tensor counts = at::empty({ranks}, rows.options());
  shard_comm_.all_gather(count, counts);
  const at::Tensor host_counts =
      read_on_host(counts, "reading the embedding gradient's row counts of every rank");
  std::vector<std::int64_t> row_counts(host_counts.data_ptr<std::int64_t>(), host_counts.data_ptr<std::int64_t>() + ranks);
  std::vector<std::int64_t> value_counts;
  std::int64_t total = 0;
  for (const std::int64_t c : row_counts) {
    value_counts.push_back(c * width);
    total += c;
  }
  at::Tensor all_rows = at::empty({total}, rows.options());
  at::Tensor all_values = at::empty({total * width}, values.options());
  shard_comm_.all_gather(rows, all_rows, row_counts);
  shard_comm_.all_gather(values, all_values, value_counts);
  // Those in this rank's piece of the embedding, added to its gradient shard.
  Unit& u = *units_[unit_of_[embedding_]];
  const ShardPiece& piece = u.grad_layout.pieces[static_cast<std::size_t>(shard_comm_.rank())][embedding_slot(u)];
  if (piece.rows == 0) return;
  at::Tensor mine = piece_in(u.grad, 0, piece, shape).view({piece.rows, width});
  const at::Tensor local = all_rows - piece.row_begin;
  const at::Tensor keep = at::logical_and(local >= 0, local < piece.rows).nonzero().reshape({-1});
  mine.index_add_(0, local.index_select(0, keep).to(mine.device()),
                  all_values.view({total, width}).index_select(0, keep).to(mine.device()));
}

void ShardedDataParallel::launch_reduce(Unit& u) {
  if (u.reduced.empty()) return;
  // At most one reduce-scatter in flight (it overlaps the next layer's backward): each holds a
  // whole unit of fp32 gradients.
  finish_all_reduces();
  c10::NoGradGuard no_grad;
  const std::int64_t k = u.reduce_layout.shard_numel;
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(shard_comm_.device());
  const at::ScalarType wire = wire_dtype(u);
  if (!reduce_send_.defined() || reduce_send_.scalar_type() != wire) {
    std::int64_t largest = 0;
    for (const auto& unit : units_) largest = std::max(largest, unit->reduce_layout.shard_numel);
    reduce_send_ = at::empty({largest * shard_comm_.size()}, f32.dtype(wire));
    reduce_receive_ = at::empty({largest}, f32);
  }
  u.reduce_in = reduce_send_.narrow(0, 0, k * shard_comm_.size()).zero_();
  for (std::size_t r = 0; r < u.reduced.size(); ++r) {
    const std::size_t param = u.params[u.trained[u.reduced[r]]];
    at::Tensor& owner = dense_owner(param);
    if (!owner.defined() || !owner.grad().defined()) continue;  // no gradient this micro-batch: zeros
    scatter_rows(u.reduce_layout, r, shapes_[param], owner.grad(), u.reduce_in);
    owner.mutable_grad().reset();
  }
  u.reduce_out = reduce_receive_.narrow(0, 0, k);
  u.reduce = shard_comm_.reduce_scatter_async(u.reduce_in, u.reduce_out, ReduceOp::Sum);
  // With frozen parameters the last gradient may come before the unit's backward has used them
  // all (a frozen norm after the adapters): such a unit is freed once backward has left it.
  if (plan_.shard_parameters && u.trained.size() == u.params.size()) free_parameters(u);
}

at::ScalarType ShardedDataParallel::wire_dtype(Unit& u) {
  if (!shard_comm_.sums_16bit_into_fp32()) return at::kFloat;
  std::optional<at::ScalarType> seen;
  for (const std::size_t r : u.reduced) {
    const at::Tensor& owner = dense_owner(u.params[u.trained[r]]);
    if (!owner.defined() || !owner.grad().defined()) continue;
    const at::ScalarType t = owner.grad().scalar_type();
    if ((t != at::kBFloat16 && t != at::kHalf) || (seen && *seen != t)) return at::kFloat;
    seen = t;
  }
  // No gradient this micro-batch: zeros travel in whatever dtype the buffer has.
  return seen.value_or(reduce_send_.defined() ? reduce_send_.scalar_type() : at::kFloat);
}

void ShardedDataParallel::finish_reduce(Unit& u) {
  if (!u.reduce) return;
  u.reduce->wait();
  u.reduce.reset();
  const at::Tensor arrived = plan_.offload ? u.reduce_out.to(u.grad.device()) : u.reduce_out;  // offload: back to the host
  if (u.reduced.size() == u.trained.size()) {
    u.grad.add_(arrived);
  } else {  // the reduced pieces into their places among all the unit's gradient pieces
    const auto me = static_cast<std::size_t>(shard_comm_.rank());
    for (std::size_t r = 0; r < u.reduced.size(); ++r) {
      const ShardPiece& to = u.grad_layout.pieces[me][u.reduced[r]];
      const ShardPiece& from = u.reduce_layout.pieces[me][r];
      const std::int64_t numel = to.rows * row_numel(shapes_[u.params[u.trained[u.reduced[r]]]]);
      u.grad.narrow(0, to.local_offset, numel).add_(arrived.narrow(0, from.local_offset, numel));
    }
  }
  u.reduce_in.reset();
  u.reduce_out.reset();
}

void ShardedDataParallel::finish_all_reduces() {
  for (auto& u : units_) finish_reduce(*u);
}

void ShardedDataParallel::open_step() {
  finish_all_reduces();
  if (step_open_) return;
  for (auto& u : units_) u->grad.zero_();
  step_open_ = true;
}

void ShardedDataParallel::begin_micro_batch(bool sync) {
  open_step();
  // ZeRO-1 keeps whole gradients over the micro-batches, and reduces them during the last one's
  // backward, as the others do in every one.
  for (auto& u : units_) {
    u->pending = u->dense;
    u->passes_left = sync ? 1 : 2;
  }
  gather_root();
}

void ShardedDataParallel::expect_backwards(int passes) {
  open_step();
  for (auto& u : units_) {
    u->pending = u->dense;
    u->passes_left = passes;
  }
}

void ShardedDataParallel::gather_root() {
  ensure_gathered(*units_[0]);
  prefetch(1);
}

void ShardedDataParallel::finish_gradients() {
  // Gradients not reduced yet: a unit with a parameter that got no gradient in a pass.
  for (auto& u : units_) {
    const bool unreduced = std::any_of(u->reduced.begin(), u->reduced.end(), [&](std::size_t r) {
      const at::Tensor& owner = dense_owner(u->params[u->trained[r]]);
      return owner.defined() && owner.grad().defined();
    });
    if (unreduced) launch_reduce(*u);
    u->pending = 0;
  }
  finish_all_reduces();
  // No gather crosses the optimizer step: one still in flight would bring the old values.
  for (auto& u : units_)
    if (u->gather) finish_gather(*u);
  // Units with frozen parameters that backward left gathered (the first layers, the root).
  if (plan_.shard_parameters)
    for (auto& u : units_)
      if (u->gathered) free_parameters(*u);
  if (replicate_comm_.size() > 1) {
    std::vector<WorkPtr> works;
    std::vector<at::Tensor> grads;
    for (auto& u : units_) grads.push_back(to_device(u->grad, at::kFloat));
    for (auto& g : grads) works.push_back(replicate_comm_.all_reduce_async(g, ReduceOp::Sum));
    for (auto& w : works) w->wait();
    if (plan_.offload)
      for (std::size_t i = 0; i < units_.size(); ++i) units_[i]->grad.copy_(grads[i]);
  }
  c10::NoGradGuard no_grad;
  for (auto& u : units_)
    for (std::size_t j = 0; j < u->trained.size(); ++j) {
      at::Tensor& piece = pieces_[u->pieces[j]];
      const ShardPiece& where = u->grad_layout.pieces[static_cast<std::size_t>(shard_comm_.rank())][j];
      piece.mutable_grad() = u->grad.narrow(0, where.local_offset, piece.numel()).view(piece.sizes());
    }
  step_open_ = false;
}

void ShardedDataParallel::parameters_updated() {
  if (plan_.shard_parameters) return;  // the next forward gathers the updated shards
  // ZeRO-1/2: the updated shards are gathered into the whole parameters while the next forward
  // runs, each unit waited for just before it (gather_root, before_layer), at most two in
  // flight (each holds a whole unit). Until then the parameters keep their old values; nothing
  // reads them outside a forward (checkpoints save the shards).
  for (auto& u : units_)
    if (!u->params.empty()) u->gathered = false;
  prefetch(0);
  prefetch(1);
}

std::int64_t ShardedDataParallel::gathered_bytes() const {
  std::int64_t n = 0;
  for (const auto& p : params_) n += static_cast<std::int64_t>(p.storage().nbytes());
  for (const auto& u : units_)
    for (const at::Tensor& t : u->bytes) n += static_cast<std::int64_t>(t.storage().nbytes());
  return n;
}

std::int64_t ShardedDataParallel::shard_bytes_held() const {
  std::int64_t n = 0;
  for (const auto& u : units_)
    n += static_cast<std::int64_t>(u->master.nbytes() + (u->split ? u->frozen_master.nbytes() : 0));
  return n;
}

std::int64_t ShardedDataParallel::frozen_byte_shards() const {
  std::int64_t n = 0;
  for (const auto& u : units_)
    if (u->bytes_shard.defined()) n += u->bytes_shard.numel();
  return n;
}

std::int64_t ShardedDataParallel::largest_unit_bytes() const {
  std::int64_t best = 0;
  for (const auto& u : units_) {
    std::int64_t n = 0;
    for (std::size_t k : u->params)
      n += static_cast<std::int64_t>(c10::elementSize(plan_.compute_dtype)) * rows_of(shapes_[k]) *
           row_numel(shapes_[k]);
    best = std::max(best, n);
  }
  return best;
}

}  // namespace lft::engine
