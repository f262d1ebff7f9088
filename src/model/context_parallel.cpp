// Ulysses context parallelism: the chunking of a micro-batch and the differentiable exchanges.
#include "lft/model/context_parallel.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

namespace lft::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

SequenceExchange* group_of(AutogradContext* ctx) {
  return reinterpret_cast<SequenceExchange*>(ctx->saved_data["group"].toInt());
}

std::int64_t address(SequenceExchange& group) { return reinterpret_cast<std::int64_t>(&group); }

// [B, t, H, d] -> [B, n * t, H / n, d] over a group of n ranks.
at::Tensor to_heads(SequenceExchange& group, const at::Tensor& x) {
  const std::int64_t n = group.size(), b = x.size(0), t = x.size(1), h = x.size(2), d = x.size(3);
  TORCH_CHECK(h % n == 0, "context parallelism: ", h, " heads do not divide over ", n, " cp ranks");
  const at::Tensor blocks = x.reshape({b, t, n, h / n, d}).permute({2, 0, 1, 3, 4}).contiguous();
  const at::Tensor got = group.all_to_all(blocks).view({n, b, t, h / n, d});  // block r: chunk r
  return got.permute({1, 0, 2, 3, 4}).reshape({b, n * t, h / n, d});
}

// [B, n * t, h, d] -> [B, t, n * h, d].
at::Tensor to_sequence(SequenceExchange& group, const at::Tensor& x) {
  const std::int64_t n = group.size(), b = x.size(0), s = x.size(1), h = x.size(2), d = x.size(3);
  TORCH_CHECK(s % n == 0, "context parallelism: ", s, " positions do not divide over ", n, " cp ranks");
  const std::int64_t t = s / n;
  const at::Tensor blocks = x.reshape({b, n, t, h, d}).permute({1, 0, 2, 3, 4}).contiguous();
  const at::Tensor got = group.all_to_all(blocks).view({n, b, t, h, d});  // block r: heads of rank r
  return got.permute({1, 2, 0, 3, 4}).reshape({b, t, n * h, d});
}

struct SequenceToHeads : torch::autograd::Function<SequenceToHeads> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, std::int64_t group) {
    ctx->saved_data["group"] = group;
    return to_heads(*reinterpret_cast<SequenceExchange*>(group), x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {to_sequence(*group_of(ctx), grads[0]), at::Tensor()};
  }
};

struct HeadsToSequence : torch::autograd::Function<HeadsToSequence> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, std::int64_t group) {
    ctx->saved_data["group"] = group;
    return to_sequence(*reinterpret_cast<SequenceExchange*>(group), x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {to_heads(*group_of(ctx), grads[0]), at::Tensor()};
  }
};

struct GatherSequence : torch::autograd::Function<GatherSequence> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, std::int64_t group) {
    ctx->saved_data["group"] = group;
    SequenceExchange& g = *reinterpret_cast<SequenceExchange*>(group);
    const std::int64_t n = g.size(), b = x.size(0), t = x.size(1);
    return g.all_gather(x.contiguous().reshape({-1})).view({n, b, t}).permute({1, 0, 2}).reshape({b, n * t});
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    SequenceExchange& g = *group_of(ctx);
    const std::int64_t t = grads[0].size(1) / g.size();
    return {grads[0].narrow(1, g.rank() * t, t), at::Tensor()};
  }
};

}  // namespace

at::Tensor SequenceChunk::local_positions() const { return positions[rank]; }
at::Tensor SequenceChunk::local_ids() const { return input_ids.index_select(1, local_positions()); }
at::Tensor SequenceChunk::local_targets() const { return input_ids.index_select(1, local_positions() + 1); }

std::int64_t chunk_length(std::int64_t length, int ranks, std::int64_t multiple, bool ring) {
  const std::int64_t pieces = ring ? 2 * ranks : ranks, unit = pieces * multiple;
  return (length + unit - 1) / unit * multiple * (ring ? 2 : 1);
}

SequenceChunk sequence_chunk(const SequenceExchange& group, const at::Tensor& input_ids, const at::Tensor& segment_ids,
                             std::int64_t multiple) {
  SequenceChunk c;
  const std::int64_t n = group.size();
  c.length = input_ids.size(1);
  c.chunk = chunk_length(c.length, group.size(), multiple, group.ring());
  c.padded = c.chunk * n;
  c.rank = group.rank();
  const auto longs = at::TensorOptions().dtype(at::kLong);
  if (group.ring()) {  // rank r: pieces r and 2n-1-r of 2n
    const std::int64_t half = c.chunk / 2;
    std::vector<at::Tensor> rows;
    for (std::int64_t r = 0; r < n; ++r)
      rows.push_back(at::cat({at::arange(r * half, (r + 1) * half, longs),
                              at::arange((2 * n - 1 - r) * half, (2 * n - r) * half, longs)}));
    c.host_positions = at::stack(rows);
  } else {
    c.host_positions = at::arange(c.padded, longs).view({n, c.chunk});
  }
  c.positions = c.host_positions.to(input_ids.device());
  c.input_ids = at::constant_pad_nd(input_ids, {0, c.padded + 1 - c.length}, 0);
  if (segment_ids.defined()) {
    const at::Tensor fresh = segment_ids.amax(1, /*keepdim=*/true) + 1;  // the padding's own segment
    c.segment_ids = at::cat({segment_ids, fresh.expand({segment_ids.size(0), c.padded - c.length})}, 1);
  }
  return c;
}

at::Tensor sequence_to_heads(SequenceExchange& group, const at::Tensor& x) {
  return SequenceToHeads::apply(x, address(group));
}

at::Tensor heads_to_sequence(SequenceExchange& group, const at::Tensor& x) {
  return HeadsToSequence::apply(x, address(group));
}

at::Tensor gather_sequence(SequenceExchange& group, const at::Tensor& x, const SequenceChunk& chunk) {
  const at::Tensor ranked = GatherSequence::apply(x, address(group));  // rank by rank
  if (!group.ring()) return ranked;
  return ranked.index_select(1, at::argsort(chunk.positions.reshape({-1})));
}

}  // namespace lft::model
