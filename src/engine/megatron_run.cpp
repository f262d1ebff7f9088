// The megatron engine's step: the tensor-parallel operations the model calls, and the pipeline
// schedule that runs a step's micro-batches through the stages' units.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <utility>

#include "lft/engine/megatron.h"
#include "lft/engine/megatron_internal.h"
#include "lft/engine/tensor_parallel.h"
#include "lft/model/autocast.h"
#include "lft/runtime/error.h"

namespace lft::engine {

// ---- the tensor-parallel operations the model's forward calls ----

at::Tensor MegatronEngine::enter(const at::Tensor& x) {
  if (plan_.tp == 1) return x;
  return plan_.sequence_parallel ? gather_sequence(x, tp_) : copy_to_tp(x, tp_);
}

at::Tensor MegatronEngine::exit(const at::Tensor& y) {
  if (plan_.tp == 1) return y;
  return plan_.sequence_parallel ? scatter_sequence(y, tp_) : reduce_from_tp(y, tp_);
}

// A reward model's scores [B, T / tp] of this rank's tokens under sequence parallelism -> [B, T].
at::Tensor MegatronEngine::gather_positions(const at::Tensor& values) {
  if (plan_.tp == 1 || !plan_.sequence_parallel) return values;
  return gather_sequence_slices(values.unsqueeze(-1), tp_).squeeze(-1);
}

// Vocab-parallel: this rank looks up the ids in its rows, zeros for the others; the sum over the
// tensor-parallel ranks (or its sequence slice) is the embedding.
at::Tensor MegatronEngine::embed(const at::Tensor& weight, const at::Tensor& ids) {
  if (plan_.tp == 1) return at::embedding(weight, ids);
  const std::int64_t rows = weight.size(0);
  const at::Tensor outside = ids.lt(vocab_begin_).logical_or(ids.ge(vocab_begin_ + rows));
  at::Tensor partial;
  if (rows == 0) {
    partial = at::zeros({ids.size(0), ids.size(1), weight.size(1)}, weight.options()) * weight.sum();
  } else {
    partial = at::embedding(weight, (ids - vocab_begin_).masked_fill(outside, 0)).masked_fill(outside.unsqueeze(-1), 0);
  }
  return exit(partial);
}

at::Tensor MegatronEngine::token_losses(const at::Tensor& logits, const at::Tensor& ids) {
  if (plan_.tp == 1) return model::ParallelOps::token_losses(logits, ids);
  return vocab_parallel_token_losses(logits, ids, vocab_begin_, tp_);
}

at::Tensor MegatronEngine::target_losses(const at::Tensor& logits, const at::Tensor& targets) {
  if (plan_.tp == 1) return model::ParallelOps::target_losses(logits, targets);
  return vocab_parallel_target_losses(logits, targets, vocab_begin_, tp_);
}

at::Tensor MegatronEngine::forward_chunk(int chunk, const MicroBatch& batch, const at::Tensor& input,
                                         const MicroBatchOptions& options, at::Tensor& sequence_sums) {
  const auto [first, last] = chunk_units(chunk);
  const at::Tensor out = model_->forward_units(first, last, batch.input_ids, batch.segment_ids, input, batch.token_mask);
  if (last != model_->num_units()) return out;
  const at::Tensor losses = out * batch.weights;
  sequence_sums = losses.detach().to(at::kDouble).sum(1);
  return micro_batch_loss(options, losses, batch) * options.loss_factor;
}

// ---- the pipeline ----

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Live {
  at::Tensor input;   // received activation (a leaf that collects its gradient), or undefined
  at::Tensor output;  // the loss (last virtual stage) or the activation handed on
};

}  // namespace

at::Tensor MegatronEngine::run_micro_batches(model::CausalLM&, const std::vector<MicroBatch>& batches,
                                             const MicroBatchOptions& o) {
  const auto m = static_cast<std::int64_t>(batches.size());
  const int pp = plan_.pp, v = plan_.virtual_stages, last = plan_.last_virtual_stage();
  if (static_cast<std::int64_t>(pp) * v * m * 2 > kMaxPipelineTag)
    throw UsageError("megatron: " + std::to_string(m) + " micro-batches x " + std::to_string(pp * v) +
                     " virtual stages exceed the point-to-point tags MPI guarantees; use fewer micro-batches");
  const int prev = (stage_ + pp - 1) % pp, next = (stage_ + 1) % pp;
  std::vector<PipelineAction> actions;
  // Each parameter's gradient is final at its chunk's backward of the last micro-batch.
  if (o.backward && dp_buckets_) dp_buckets_->expect_backwards(static_cast<int>(m));
  if (o.backward && sharded_) sharded_->expect_backwards(static_cast<int>(m));
  if (o.backward) {
    actions = pipeline_actions(plan_.schedule, pp, stage_, m, v);
  } else {
    for (std::int64_t mb = 0; mb < m; ++mb)
      for (int c = 0; c < v; ++c) actions.push_back({PipelineAction::Kind::Forward, mb, c});
  }
  std::vector<at::Tensor> sums(static_cast<std::size_t>(m));
  std::map<std::pair<std::int64_t, int>, Live> live;
  std::vector<std::pair<WorkPtr, at::Tensor>> sends;  // in flight, with their buffers
  // A stage's output waits to be sent until the next action starts: if that action receives, the
  // send and the receive are posted together (grouped on NCCL); else the send goes alone.
  struct PendingSend {
    at::Tensor buffer;
    int dst, tag;
  };
  std::optional<PendingSend> pending;
  auto post_pending = [&] {
    if (!pending) return;
    sends.emplace_back(pp_.send_async(pending->buffer, pending->dst, pending->tag), pending->buffer);
    pending.reset();
  };
  auto receive = [&](const at::Tensor& into, int src, int tag) {
    const auto start = Clock::now();
    if (pending) {
      Communicator::SendRecv both = pp_.send_recv_async(pending->buffer, pending->dst, pending->tag, into, src, tag);
      sends.emplace_back(std::move(both.send), pending->buffer);
      pending.reset();
      both.recv->wait();
    } else {
      pp_.recv(into, src, tag);
    }
    pipeline_wait_seconds_ += seconds_since(start);
  };
  executed_.clear();
  peak_live_ = 0;
  auto activation_shape = [&](const MicroBatch& b) {
    // With context parallelism a stage hands on its chunk of each sequence.
    const model::SequenceExchange* cp = model_->context_parallel();
    const std::int64_t length = cp ? model::chunk_length(b.input_ids.size(1), cp->size(), sequence_multiple(), cp->ring())
                                   : b.input_ids.size(1);
    const std::int64_t t = length / (plan_.sequence_parallel ? plan_.tp : 1);
    return std::vector<std::int64_t>{b.input_ids.size(0), t, model_->config().hidden_size};
  };
  const auto f32 = batches.front().input_ids.options().dtype(at::kFloat);

  for (const PipelineAction& a : actions) {
    // A send's buffer is released once the send has completed, not at the end of the step.
    sends.erase(std::remove_if(sends.begin(), sends.end(), [](auto& send) { return send.first->test(); }),
                sends.end());
    executed_.push_back(a);
    const MicroBatch& batch = batches[static_cast<std::size_t>(a.micro_batch)];
    const int g = plan_.virtual_stage(stage_, a.chunk);
    const auto key = std::make_pair(a.micro_batch, a.chunk);
    const bool forward = a.kind == PipelineAction::Kind::Forward;
    // Sharded data parallel: the embedding / head unit whole for this forward or backward (the
    // layers gather themselves); another micro-batch's backward may have freed it.
    if (sharded_) sharded_->gather_root();
    if (forward ? g == 0 : g == last) post_pending();  // this action receives nothing
    if (forward) {
      Live l;
      if (g > 0) {
        l.input = at::empty(activation_shape(batch), f32);
        receive(l.input, prev, activation_tag(g, a.micro_batch, m));
        l.input.requires_grad_(o.backward);
      }
      {
        model::AutocastScope autocast(o.compute, batch.input_ids.device().type());
        l.output = forward_chunk(a.chunk, batch, l.input, o, sums[static_cast<std::size_t>(a.micro_batch)]);
      }
      if (g < last) pending = PendingSend{l.output.detach().to(at::kFloat).contiguous(), next, activation_tag(g + 1, a.micro_batch, m)};
      if (o.backward) live.emplace(key, std::move(l));
      peak_live_ = std::max(peak_live_, static_cast<int>(live.size()));
      continue;
    }
    Live l = std::move(live.at(key));
    live.erase(key);
    if (g == last) {
      l.output.backward();
    } else {
      at::Tensor grad = at::empty(l.output.sizes(), f32);
      receive(grad, next, gradient_tag(g, a.micro_batch, m));
      // A first stage that trains nothing (fine-tuning) has no backward to run.
      if (l.output.requires_grad()) l.output.backward(grad.to(l.output.scalar_type()));
    }
    if (g > 0) pending = PendingSend{l.input.grad().to(at::kFloat).contiguous(), prev, gradient_tag(g - 1, a.micro_batch, m)};
  }
  post_pending();
  for (auto& [work, buffer] : sends) work->wait();

  // The losses live on the last stage; every rank reports them.
  std::int64_t total = 0;
  for (const MicroBatch& b : batches) total += b.input_ids.size(0);
  at::Tensor all = stage_ == pp - 1 ? at::cat(sums) : at::empty({total}, f32.dtype(at::kDouble));
  if (pp > 1) pp_.broadcast(all, pp - 1);
  return all;
}

std::string MegatronEngine::summary(double steps, double step_seconds) {
  if (plan_.pp == 1) return "";
  // Under NCCL the host never blocks in a receive (the compute stream waits on the device), so
  // the host's clock reads ~0 there: the device's measure of the compute stream's stalls in the
  // receives stands in (since training began: the statistics are reset then).
  double waited_here = pipeline_wait_seconds_;
  if (pp_.times_on_device()) {
    pp_.settle_stats();
    waited_here = pp_.stats()[CollKind::Recv].waited_seconds;
  }
  at::Tensor waited = at::full({1}, waited_here, at::TensorOptions().dtype(at::kDouble));
  pp_host_.all_reduce(waited);
  const double mean = waited.item<double>() / plan_.pp;  // seconds over the run, per stage
  const double theory = simulate_pipeline(plan_.schedule, plan_.pp, plan_.micro_batches, plan_.virtual_stages,
                                          1.0 / plan_.virtual_stages, 2.0 / plan_.virtual_stages)
                            .idle_fraction;
  char line[320];
  std::snprintf(line, sizeof line,
                "\n  pipeline   %s, pp %d x %d chunk(s), %lld micro-batches: bubble %.3f of the step time "
                "(stages waited %.1f ms of %.1f ms per step; the schedule's idle slots: %.3f)",
                pipeline_schedule_name(plan_.schedule), plan_.pp, plan_.virtual_stages,
                static_cast<long long>(plan_.micro_batches), step_seconds > 0 ? mean / step_seconds : 0.0,
                1e3 * mean / steps, 1e3 * step_seconds / steps, theory);
  return line;
}

}  // namespace lft::engine
