// Ring attention (context_parallel.h): this rank's queries attend to every rank's key/value block
// as the blocks travel around the cp group, accumulated with an online softmax (the running
// log-sum-exp of each query row); backward recomputes each block's probabilities from the saved
// log-sum-exp and sends the blocks' gradients around the ring with them, one more hop at the end
// bringing each home. Fp32 accumulation for 16-bit inputs. Query rows go in tiles, so a block's
// scores never take more than kTileRows x chunk per head.
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "lft/model/context_parallel.h"

namespace lft::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Query rows at `qpos` see keys at `kpos`: causal, within `window` (> 0), within segments.
at::Tensor block_mask(const at::Tensor& qpos, const at::Tensor& kpos, const at::Tensor& segments, std::int64_t window) {
  const at::Tensor qi = qpos.unsqueeze(1), kj = kpos.unsqueeze(0);
  at::Tensor m = kj <= qi;
  if (window > 0) m = m.logical_and((qi - kj) < window);
  m = m.view({1, 1, qpos.size(0), kpos.size(0)});
  if (segments.defined() && segments.numel() > 0) {
    const at::Tensor sq = segments.index_select(1, qpos), sk = segments.index_select(1, kpos);
    m = m.logical_and(sq.unsqueeze(2).eq(sk.unsqueeze(1)).unsqueeze(1));
  }
  return m;
}

// Masked scaled scores of q [B, H, t, d] against k [B, H, t, d].
at::Tensor scores(const at::Tensor& q, const at::Tensor& k, const at::Tensor& mask, double scale) {
  return at::matmul(q, k.transpose(-1, -2)).mul_(scale).masked_fill_(mask.logical_not(), -std::numeric_limits<double>::infinity());
}

at::Tensor finite_or_zero(const at::Tensor& x) { return at::where(at::isinf(x), at::zeros_like(x), x); }

at::ScalarType accumulation_type(const at::Tensor& t) { return t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat; }

constexpr std::int64_t kTileRows = 128;

// From the host's copy of the positions: each rank's first position and this rank's positions,
// so a tile whose queries all come before a block's first key is skipped (nothing visible).
std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> causal_bounds(const at::Tensor& host_positions, int me) {
  const auto p = host_positions.accessor<std::int64_t, 2>();
  std::vector<std::int64_t> first(static_cast<std::size_t>(p.size(0))), mine(static_cast<std::size_t>(p.size(1)));
  for (std::int64_t r = 0; r < p.size(0); ++r) first[static_cast<std::size_t>(r)] = p[r][0];
  // Positions rise along a chunk: the largest up to row i is row i's.
  for (std::int64_t i = 0; i < p.size(1); ++i) mine[static_cast<std::size_t>(i)] = p[me][i];
  return {first, mine};
}

// f(begin, rows) over the query rows of a chunk of t, kTileRows at a time.
template <typename F>
void for_row_tiles(std::int64_t t, F&& f) {
  for (std::int64_t r = 0; r < t; r += kTileRows) f(r, std::min(kTileRows, t - r));
}

struct RingAttentionFunction : torch::autograd::Function<RingAttentionFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& positions, const at::Tensor& host_positions, const at::Tensor& segments,
                            std::int64_t group_address, std::int64_t window) {
    SequenceExchange& group = *reinterpret_cast<SequenceExchange*>(group_address);
    const int n = group.size(), me = group.rank();
    const auto [first_key, last_query] = causal_bounds(host_positions, me);
    const auto acc = accumulation_type(q);
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
    const at::Tensor qf = q.to(acc), qpos = positions[me];
    at::Tensor kv = at::stack({k, v}).to(acc).contiguous();
    at::Tensor out = at::zeros(qf.sizes(), qf.options());
    at::Tensor lse = at::full({q.size(0), q.size(1), q.size(2)}, -std::numeric_limits<double>::infinity(), qf.options());
    for (int s = 0; s < n; ++s) {
      const int src = (me - s + n) % n;
      for_row_tiles(q.size(2), [&](std::int64_t r0, std::int64_t rows) {
        if (first_key[src] > last_query[r0 + rows - 1]) return;  // every key of the block after these queries
        const at::Tensor mask = block_mask(qpos.narrow(0, r0, rows), positions[src], segments, window);
        const at::Tensor S = scores(qf.narrow(2, r0, rows), kv[0], mask, scale);
        const at::Tensor block_lse = at::logsumexp(S, -1), tile_lse = lse.narrow(2, r0, rows);
        const at::Tensor p = at::exp(S - finite_or_zero(block_lse).unsqueeze(-1));
        const at::Tensor merged = finite_or_zero(at::logaddexp(tile_lse, block_lse));
        at::Tensor tile_out = out.narrow(2, r0, rows);
        tile_out.copy_(tile_out * at::exp(tile_lse - merged).unsqueeze(-1) +
                       at::matmul(p, kv[1]) * at::exp(block_lse - merged).unsqueeze(-1));
        tile_lse.copy_(at::logaddexp(tile_lse, block_lse));
      });
      if (s + 1 < n) {
        at::Tensor next = at::empty_like(kv);
        group.shift(kv, next);
        kv = next;
      }
    }
    ctx->save_for_backward({q, k, v, out, lse, positions, segments, host_positions});
    ctx->saved_data["group"] = group_address;
    ctx->saved_data["window"] = window;
    return out.to(q.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4], &positions = saved[5],
                     &segments = saved[6];
    SequenceExchange& group = *reinterpret_cast<SequenceExchange*>(ctx->saved_data["group"].toInt());
    const std::int64_t window = ctx->saved_data["window"].toInt();
    const int n = group.size(), me = group.rank();
    const auto [first_key, last_query] = causal_bounds(saved[7], me);
    const auto acc = accumulation_type(q);
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
    const at::Tensor dout = grads[0].to(acc), qf = q.to(acc), qpos = positions[me];
    const at::Tensor delta = (dout * out).sum(-1, /*keepdim=*/true);
    const at::Tensor row_lse = finite_or_zero(lse).unsqueeze(-1);
    at::Tensor dq = at::zeros(qf.sizes(), qf.options());
    // The block this rank holds and the gradient it has gathered so far, travelling together.
    at::Tensor held = at::cat({at::stack({k, v}).to(acc), at::zeros({2, k.size(0), k.size(1), k.size(2), k.size(3)}, qf.options())})
                          .contiguous();
    for (int s = 0; s < n; ++s) {
      const int src = (me - s + n) % n;
      for_row_tiles(q.size(2), [&](std::int64_t r0, std::int64_t rows) {
        if (first_key[src] > last_query[r0 + rows - 1]) return;
        const at::Tensor mask = block_mask(qpos.narrow(0, r0, rows), positions[src], segments, window);
        const at::Tensor q_tile = qf.narrow(2, r0, rows), dout_tile = dout.narrow(2, r0, rows);
        const at::Tensor S = scores(q_tile, held[0], mask, scale);
        const at::Tensor p = at::exp(S - row_lse.narrow(2, r0, rows));
        const at::Tensor dp = at::matmul(dout_tile, held[1].transpose(-1, -2));
        const at::Tensor ds = p * (dp - delta.narrow(2, r0, rows));
        dq.narrow(2, r0, rows).add_(at::matmul(ds, held[0]), scale);
        held[2].add_(at::matmul(ds.transpose(-1, -2), q_tile), scale);
        held[3].add_(at::matmul(p.transpose(-1, -2), dout_tile));
      });
      if (s + 1 < n) {
        at::Tensor next = at::empty_like(held);
        group.shift(held, next);
        held = next;
      }
    }
    at::Tensor mine = held.narrow(0, 2, 2).contiguous();  // the gradient of rank me + 1's block
    if (n > 1) {
      at::Tensor home = at::empty_like(mine);
      group.shift(mine, home);
      mine = home;
    }
    return {dq.to(q.scalar_type()), mine[0].to(k.scalar_type()), mine[1].to(v.scalar_type()), at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor ring_attention(const ContextSplit& split, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          std::int64_t window) {
  TORCH_CHECK(split.group != nullptr && split.positions.defined(), "ring_attention: no ring split");
  TORCH_CHECK(k.sizes() == q.sizes() && v.sizes() == q.sizes(), "ring_attention: q ", q.sizes(), ", k ", k.sizes(),
              ", v ", v.sizes(), " must have one shape");
  const at::Tensor segments = split.segment_ids.defined() ? split.segment_ids : at::empty({0}, split.positions.options());
  return RingAttentionFunction::apply(q, k, v, split.positions, split.host_positions, segments,
                                      reinterpret_cast<std::int64_t>(split.group), window);
}

}  // namespace lft::model
