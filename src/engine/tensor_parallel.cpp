#include "lft/engine/tensor_parallel.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <algorithm>

namespace lft::engine {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

Communicator& comm_of(AutogradContext* ctx) {
  return *reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt());
}

at::Tensor all_reduced(const at::Tensor& x, Communicator& comm) {
  at::Tensor out = x.contiguous().clone();
  comm.all_reduce(out);
  return out;
}

// [B, T/n, H] on each rank -> [B, T, H], rank r's rows at T-offset r * T/n.
at::Tensor all_gathered_t(const at::Tensor& x, Communicator& comm) {
  const at::Tensor in = x.transpose(0, 1).contiguous();  // [T/n, B, H]
  std::vector<std::int64_t> shape = in.sizes().vec();
  shape[0] *= comm.size();
  at::Tensor out = at::empty(shape, in.options());
  comm.all_gather(in, out);
  return out.transpose(0, 1).contiguous();
}

// [B, T, H] on each rank -> the sum over ranks of rows [r * T/n, (r+1) * T/n) on rank r.
at::Tensor reduce_scattered_t(const at::Tensor& x, Communicator& comm) {
  TORCH_CHECK(x.size(1) % comm.size() == 0, "sequence parallel: ", x.size(1),
              " tokens do not split over ", comm.size(), " tensor-parallel ranks");
  const at::Tensor in = x.transpose(0, 1).contiguous();  // [T, B, H]
  std::vector<std::int64_t> shape = in.sizes().vec();
  shape[0] /= comm.size();
  at::Tensor out = at::empty(shape, in.options());
  comm.reduce_scatter(in, out);
  return out.transpose(0, 1).contiguous();
}

struct CopyToTp : torch::autograd::Function<CopyToTp> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, std::int64_t comm) {
    ctx->saved_data["comm"] = comm;
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {all_reduced(g[0], comm_of(ctx)), at::Tensor()};
  }
};

struct ReduceFromTp : torch::autograd::Function<ReduceFromTp> {
  static at::Tensor forward(AutogradContext*, const at::Tensor& x, std::int64_t comm) {
    return all_reduced(x, *reinterpret_cast<Communicator*>(comm));
  }
  static variable_list backward(AutogradContext*, variable_list g) { return {g[0], at::Tensor()}; }
};

struct GatherSequence : torch::autograd::Function<GatherSequence> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, std::int64_t comm) {
    ctx->saved_data["comm"] = comm;
    return all_gathered_t(x, *reinterpret_cast<Communicator*>(comm));
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {reduce_scattered_t(g[0], comm_of(ctx)), at::Tensor()};
  }
};

struct GatherSequenceSlices : torch::autograd::Function<GatherSequenceSlices> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, std::int64_t comm) {
    ctx->saved_data["comm"] = comm;
    return all_gathered_t(x, *reinterpret_cast<Communicator*>(comm));
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    Communicator& comm = comm_of(ctx);
    const std::int64_t part = g[0].size(1) / comm.size();
    return {g[0].narrow(1, part * comm.rank(), part).contiguous(), at::Tensor()};
  }
};

struct ScatterSequence : torch::autograd::Function<ScatterSequence> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, std::int64_t comm) {
    ctx->saved_data["comm"] = comm;
    return reduce_scattered_t(x, *reinterpret_cast<Communicator*>(comm));
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {all_gathered_t(g[0], comm_of(ctx)), at::Tensor()};
  }
};

// loss_i = log(sum_v exp(z_iv)) - z_i,target with z = logits - max over the whole vocabulary;
// the max, the sum and the target's logit are each one all-reduce of [N] values.
struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& targets,
                            std::int64_t vocab_start, std::int64_t comm_ptr, std::int64_t ignore_id) {
    Communicator& comm = *reinterpret_cast<Communicator*>(comm_ptr);
    const std::int64_t local_vocab = logits.size(1);
    at::Tensor max = std::get<0>(logits.max(1)).contiguous();
    comm.all_reduce(max, ReduceOp::Max);
    const at::Tensor z = logits - max.unsqueeze(1);
    const at::Tensor e = z.exp();
    at::Tensor sum = e.sum(1).contiguous();
    comm.all_reduce(sum);
    const at::Tensor mine = targets.ge(vocab_start).logical_and(targets.lt(vocab_start + local_vocab));
    const at::Tensor local_target = (targets - vocab_start).clamp(0, std::max<std::int64_t>(local_vocab - 1, 0));
    at::Tensor picked = local_vocab == 0 ? at::zeros_like(max)
                                         : z.gather(1, local_target.unsqueeze(1)).squeeze(1) * mine;
    picked = picked.contiguous();
    comm.all_reduce(picked);
    const at::Tensor keep = targets.ne(ignore_id);
    at::Tensor loss = (sum.log() - picked) * keep;
    ctx->save_for_backward({e / sum.unsqueeze(1), local_target, mine.logical_and(keep), keep});
    return loss;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& softmax = saved[0];
    at::Tensor grad = softmax * saved[3].unsqueeze(1);
    if (grad.size(1) > 0)
      grad.scatter_add_(1, saved[1].unsqueeze(1), -saved[2].to(grad.scalar_type()).unsqueeze(1));
    grad.mul_(g[0].unsqueeze(1));
    return {grad, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

std::int64_t handle(Communicator& comm) { return reinterpret_cast<std::int64_t>(&comm); }

}  // namespace

at::Tensor copy_to_tp(const at::Tensor& x, Communicator& tp) { return CopyToTp::apply(x, handle(tp)); }
at::Tensor reduce_from_tp(const at::Tensor& x, Communicator& tp) { return ReduceFromTp::apply(x, handle(tp)); }
at::Tensor gather_sequence(const at::Tensor& x, Communicator& tp) { return GatherSequence::apply(x, handle(tp)); }
at::Tensor scatter_sequence(const at::Tensor& x, Communicator& tp) { return ScatterSequence::apply(x, handle(tp)); }
at::Tensor gather_sequence_slices(const at::Tensor& x, Communicator& tp) {
  return GatherSequenceSlices::apply(x, handle(tp));
}

at::Tensor vocab_parallel_token_losses(const at::Tensor& local_logits, const at::Tensor& input_ids,
                                       std::int64_t vocab_start, Communicator& tp, std::int64_t ignore_id) {
  TORCH_CHECK(local_logits.dim() == 3 && input_ids.dim() == 2 && input_ids.size(1) == local_logits.size(1),
              "vocab_parallel_token_losses: logits ", local_logits.sizes(), ", input_ids ", input_ids.sizes());
  const std::int64_t b = local_logits.size(0), t = local_logits.size(1);
  if (t < 2) return at::zeros({b, 0}, local_logits.options().dtype(at::kFloat));
  return vocab_parallel_target_losses(local_logits.narrow(1, 0, t - 1), input_ids.narrow(1, 1, t - 1), vocab_start, tp,
                                      ignore_id);
}

at::Tensor vocab_parallel_target_losses(const at::Tensor& local_logits, const at::Tensor& targets,
                                        std::int64_t vocab_start, Communicator& tp, std::int64_t ignore_id) {
  TORCH_CHECK(local_logits.dim() == 3 && targets.dim() == 2 && targets.size(1) == local_logits.size(1),
              "vocab_parallel_target_losses: logits ", local_logits.sizes(), ", targets ", targets.sizes());
  const std::int64_t b = local_logits.size(0), t = local_logits.size(1), v = local_logits.size(2);
  const at::Tensor pred = local_logits.to(at::kFloat).reshape({-1, v});
  const at::Tensor target = targets.to(at::kLong).reshape({-1});
  return VocabParallelCrossEntropy::apply(pred, target, vocab_start, handle(tp), ignore_id).view({b, t});
}

SplitRange split_range(std::int64_t size, int parts, int index) {
  const std::int64_t per = (size + parts - 1) / parts;
  const std::int64_t begin = std::min(size, per * index);
  return {begin, std::min(size, begin + per) - begin};
}

}  // namespace lft::engine
