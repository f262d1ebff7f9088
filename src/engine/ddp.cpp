#include "lft/engine/ddp.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "lft/model/causal_lm.h"

#include <utility>

namespace lft::engine {

DdpEngine::DdpEngine(const EngineContext& ctx, std::string name)
    : name_(std::move(name)),
      comm_(ctx.mesh.device_dp_cp()), bucket_bytes_(ctx.cfg.real("ddp_bucket_cap_mb") * 1024.0 * 1024.0) {}

void DdpEngine::prepare(model::CausalLM& model) {
  for (const auto& item : model.named_parameters()) {
    if (!item.value().requires_grad()) continue;
    names_.push_back(item.key());
    params_.push_back(item.value());
  }
  // Every rank starts from rank 0's weights (they are equal by construction; this makes it so).
  {
    c10::NoGradGuard no_grad;
    for (auto& p : params_) comm_.broadcast(p, 0);
  }
  // Buckets in reverse parameter order: the order in which backward produces gradients.
  bucket_of_.assign(params_.size(), 0);
  offset_of_.assign(params_.size(), 0);
  double filled = bucket_bytes_;
  for (std::size_t k = params_.size(); k-- > 0;) {
    const double bytes = static_cast<double>(params_[k].numel() * params_[k].element_size());
    if (filled + bytes > bucket_bytes_ && filled > 0) {
      buckets_.emplace_back();
      filled = 0;
    }
    Bucket& b = buckets_.back();
    bucket_of_[k] = buckets_.size() - 1;
    offset_of_[k] = b.params.empty() ? 0 : offset_of_[b.params.back()] + params_[b.params.back()].numel();
    b.params.push_back(k);
    filled += bytes;
  }
  for (auto& b : buckets_) {
    const std::size_t last = b.params.back();
    b.buffer = at::zeros({offset_of_[last] + params_[last].numel()}, params_[last].options());
    b.pending = b.params.size();
  }
  for (std::size_t k = 0; k < params_.size(); ++k)
    params_[k].register_hook([this, k](const at::Tensor& grad) { on_gradient(k, grad); });
}

void DdpEngine::on_gradient(std::size_t k, const at::Tensor& grad) {
  if (!sync_) return;
  drive_progress();
  Bucket& b = buckets_[bucket_of_[k]];
  at::Tensor slot = b.buffer.narrow(0, offset_of_[k], params_[k].numel()).view(params_[k].sizes());
  const at::Tensor& accumulated = params_[k].grad();  // earlier micro-batches of this step
  if (accumulated.defined()) at::add_out(slot, accumulated, grad);
  else slot.copy_(grad);
  if (--b.pending == 0) launch(b);
}

void DdpEngine::launch(Bucket& b) { b.work = comm_.all_reduce_async(b.buffer, ReduceOp::Sum); }

void DdpEngine::drive_progress() {
  for (auto& b : buckets_)
    if (b.work) b.work->test();
}

void DdpEngine::finish_gradients() {
  if (!sync_) return;
  for (auto& b : buckets_) {
    if (!b.work) {  // a parameter got no gradient this step: its slot contributes zeros
      for (std::size_t k : b.params)
        if (!params_[k].grad().defined())
          b.buffer.narrow(0, offset_of_[k], params_[k].numel()).zero_();
      launch(b);
    }
  }
  c10::NoGradGuard no_grad;
  for (auto& b : buckets_) {
    b.work->wait();
    b.work.reset();
    b.pending = b.params.size();
    for (std::size_t k : b.params) {
      at::Tensor reduced = b.buffer.narrow(0, offset_of_[k], params_[k].numel()).view(params_[k].sizes());
      if (params_[k].grad().defined()) params_[k].mutable_grad().copy_(reduced);
      else params_[k].mutable_grad() = reduced.clone();
    }
  }
}

}  // namespace lft::engine
