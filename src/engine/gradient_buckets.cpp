// Bucketed gradient all-reduce launched from backward hooks.
#include "lft/engine/gradient_buckets.h"

#include <utility>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

namespace lft::engine {

GradientBuckets::GradientBuckets(Communicator& comm, std::vector<at::Tensor> params, double bucket_bytes,
                                 std::optional<at::ScalarType> reduce_dtype)
    : comm_(comm), params_(std::move(params)) {
  bucket_of_.assign(params_.size(), 0);
  offset_of_.assign(params_.size(), 0);
  backwards_left_.assign(params_.size(), 1);
  double filled = bucket_bytes;
  for (std::size_t k = params_.size(); k-- > 0;) {
    const double bytes = static_cast<double>(params_[k].numel() * params_[k].element_size());
    if (filled + bytes > bucket_bytes && filled > 0) {
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
    const auto options = params_[last].options().dtype(reduce_dtype.value_or(params_[last].scalar_type()));
    b.buffer = at::zeros({offset_of_[last] + params_[last].numel()}, options.requires_grad(false));
    b.pending = b.params.size();
  }
  for (std::size_t k = 0; k < params_.size(); ++k)
    params_[k].register_hook([this, k](const at::Tensor& grad) { on_gradient(k, grad); });
}

void GradientBuckets::expect_backwards(int backwards) { backwards_left_.assign(params_.size(), backwards); }

at::Tensor GradientBuckets::slot(std::size_t k) {
  return buckets_[bucket_of_[k]].buffer.narrow(0, offset_of_[k], params_[k].numel()).view(params_[k].sizes());
}

void GradientBuckets::on_gradient(std::size_t k, const at::Tensor& grad) {
  if (backwards_left_[k] == 0 || --backwards_left_[k] > 0) return;
  drive_progress();
  at::Tensor s = slot(k);
  const at::Tensor& accumulated = params_[k].grad();  // the earlier backward passes of this step
  s.copy_(grad);
  if (accumulated.defined()) s.add_(accumulated);
  Bucket& b = buckets_[bucket_of_[k]];
  if (--b.pending == 0) launch(b);
}

void GradientBuckets::launch(Bucket& b) { b.work = comm_.all_reduce_async(b.buffer, ReduceOp::Sum); }

std::size_t GradientBuckets::buckets_in_flight() const {
  std::size_t n = 0;
  for (const auto& b : buckets_) n += b.work ? 1 : 0;
  return n;
}

void GradientBuckets::drive_progress() {
  for (auto& b : buckets_)
    if (b.work) b.work->test();
}

void GradientBuckets::finish() {
  c10::NoGradGuard no_grad;
  for (auto& b : buckets_) {
    if (b.work) continue;
    for (std::size_t k : b.params) {  // no final gradient this step: what it accumulated, or zeros
      if (backwards_left_[k] == 0) continue;
      const at::Tensor& accumulated = params_[k].grad();
      if (accumulated.defined()) slot(k).copy_(accumulated);
      else slot(k).zero_();
    }
    launch(b);
  }
  for (auto& b : buckets_) {
    b.work->wait();
    b.work.reset();
    b.pending = b.params.size();
    for (std::size_t k : b.params) {
      const at::Tensor reduced = slot(k);
      if (params_[k].grad().defined()) params_[k].mutable_grad().copy_(reduced);
      else params_[k].mutable_grad() = reduced.to(params_[k].scalar_type(), /*non_blocking=*/false, /*copy=*/true);
    }
  }
  backwards_left_.assign(params_.size(), 1);
}

}  // namespace lft::engine
