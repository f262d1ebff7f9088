#include "lft/model/blocked_attention.h"

#include <algorithm>
#include <limits>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/autograd.h>

#include "fused_kernels.h"
#include "lft/model/fused.h"

namespace lft::model {
namespace {

// Query rows per block: 128 measured fastest at 512-token sequences (Qwen3-0.6B's heads, one
// core: forward, recomputation and backward of one layer 64 ms, against 111 ms for
// scaled_dot_product_attention; blocks of 64 spend 84 ms, 256 64 ms, one block 80 ms).
constexpr std::int64_t kBlockRows = 128;

// The probabilities' bytes per token and query head the blocked attention may keep for backward
// (576 keys a row on average in fp32): up to 1024 tokens in fp32, 2176 in bf16, 640 in bf16
// without the fused softmax (6 bytes a score). A Qwen3-0.6B layer keeps ~6.6 KiB of other
// activations per token and head in fp32, so the scores add at most ~35% to a layer's.
constexpr double kMaxSavedBytesPerTokenAndHead = 2304;

// Additive mask of the query rows [first, first + rows) over keys [0, first + rows): -inf above
// the diagonal, repeated for the `group` query heads whose rows are stacked in one block.
at::Tensor diagonal_mask(std::int64_t first, std::int64_t rows, std::int64_t group, const at::TensorOptions& options) {
  const std::int64_t keys = first + rows;
  const auto index = at::TensorOptions().dtype(at::kLong);
  const at::Tensor query = at::arange(first, keys, index).unsqueeze(1), key = at::arange(keys, index).unsqueeze(0);
  const at::Tensor hidden = key > query;
  return at::zeros({rows, keys}, options)
      .masked_fill_(hidden, -std::numeric_limits<float>::infinity())
      .repeat({group, 1});
}

// The dtype attention computes in on a CPU: under autocast its dtype (scaled_dot_product_attention
// casts its inputs to it there: Qwen3's query and key leave their fp32 norms and rotary in fp32),
// else q's.
at::ScalarType compute_dtype(const at::Tensor& q) {
  return at::autocast::is_autocast_enabled(at::kCPU) && q.scalar_type() == at::kFloat
             ? at::autocast::get_autocast_dtype(at::kCPU)
             : q.scalar_type();
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The query heads of a key/value head as one stack of rows: [B, kv_heads, group * rows, d].
at::Tensor stacked_rows(const at::Tensor& x, std::int64_t first, std::int64_t rows, std::int64_t kv_heads) {
  return x.narrow(2, first, rows).reshape({x.size(0), kv_heads, -1, x.size(3)});
}

// Blocked attention with the fused causal softmax, bf16 or fp32: per block one GEMM for the
// scores, one kernel pass for scale, mask, softmax and cast, one GEMM with v; the probabilities
// are saved in the compute dtype (where the formula's autograd keeps its fp32 softmax and, in
// bf16, the bf16 copy). Backward accumulates k's and v's gradients over the blocks in fp32.
struct FusedBlockedAttention : torch::autograd::Function<FusedBlockedAttention> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k_given,
                            const at::Tensor& v_given, double scale) {
    const at::Tensor k = k_given.contiguous(), v = v_given.contiguous();
    const std::int64_t b = q.size(0), heads = q.size(1), t = q.size(2), d = q.size(3), kv_heads = k.size(1);
    // Written block by block in [B, T, heads, d], the layout o_proj reads.
    at::Tensor out = at::empty({b, t, heads, d}, q.options());
    variable_list saved{q, k, v};
    for (std::int64_t first = 0; first < t; first += kBlockRows) {
      const std::int64_t rows = std::min(kBlockRows, t - first), keys = first + rows;
      const at::Tensor scores = at::matmul(stacked_rows(q, first, rows, kv_heads), k.narrow(2, 0, keys).transpose(2, 3));
      at::Tensor p = at::empty_like(scores);
      kernels::with_dtype(q.scalar_type(), [&](auto tag) {
        using T = decltype(tag);
        LFT_KERNEL(causal_softmax_forward<T>)(scores.data_ptr<T>(), p.data_ptr<T>(), scores.numel() / keys, rows,
                                              first, keys, static_cast<float>(scale));
      });
      out.narrow(1, first, rows).copy_(at::matmul(p, v.narrow(2, 0, keys)).view({b, heads, rows, d}).transpose(1, 2));
      saved.push_back(p);
    }
    ctx->save_for_backward(saved);
    ctx->saved_data["scale"] = scale;
    return out.transpose(1, 2);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2];
    const float scale = static_cast<float>(ctx->saved_data["scale"].toDouble());
    const at::Tensor dout = grads[0].to(q.scalar_type());
    const std::int64_t b = q.size(0), heads = q.size(1), t = q.size(2), d = q.size(3), kv_heads = k.size(1);
    at::Tensor dq = at::empty({b, t, heads, d}, q.options());
    at::Tensor dk = at::zeros(k.sizes(), k.options().dtype(at::kFloat)), dv = at::zeros_like(dk);
    std::size_t block = 3;
    for (std::int64_t first = 0; first < t; first += kBlockRows, ++block) {
      const std::int64_t rows = std::min(kBlockRows, t - first), keys = first + rows;
      const at::Tensor& p = saved[block];  // [B, kv_heads, group * rows, keys]
      const at::Tensor g = stacked_rows(dout, first, rows, kv_heads), keys_k = k.narrow(2, 0, keys);
      const at::Tensor dp = at::matmul(g, v.narrow(2, 0, keys).transpose(2, 3));
      dv.narrow(2, 0, keys).add_(at::matmul(p.transpose(2, 3), g));
      at::Tensor ds = at::empty_like(p);
      kernels::with_dtype(q.scalar_type(), [&](auto tag) {
        using T = decltype(tag);
        LFT_KERNEL(causal_softmax_backward<T>)(p.data_ptr<T>(), dp.data_ptr<T>(), ds.data_ptr<T>(), p.numel() / keys,
                                               rows, first, keys, scale);
      });
      dq.narrow(1, first, rows).copy_(at::matmul(ds, keys_k).view({b, heads, rows, d}).transpose(1, 2));
      dk.narrow(2, 0, keys).add_(at::matmul(ds.transpose(2, 3), stacked_rows(q, first, rows, kv_heads)));
    }
    return {dq.transpose(1, 2), dk.to(k.scalar_type()), dv.to(v.scalar_type()), at::Tensor()};
  }
};

bool fused_softmax_on() { return (fused_kernels() & kFusedAttention) != 0 && fused_kernels_supported(); }
bool fused_softmax_serves(at::ScalarType dtype) {
  return (dtype == at::kBFloat16 || dtype == at::kFloat) && fused_softmax_on();
}

}  // namespace

// bf16 always (its GEMMs beat LibTorch's MKL path without the fused softmax too); fp32 with the
// fused softmax only (without it LibTorch's flash attention is as fast). Up to the length where
// the probabilities kept for backward reach kMaxSavedBytesPerTokenAndHead; beyond it LibTorch's
// flash attention, which keeps O(T) per head (its output and log-sum-exp) where these grow as T^2.
bool blocked_attention_serves(at::ScalarType compute, std::int64_t t, bool fused_softmax) {
  return t > kBlockRows && (compute == at::kBFloat16 || (compute == at::kFloat && fused_softmax)) &&
         blocked_attention_saved_bytes_per_token(t, compute, fused_softmax) <= kMaxSavedBytesPerTokenAndHead;
}

bool blocked_attention_applies(const at::Tensor& q) {
  return q.device().is_cpu() && blocked_attention_serves(compute_dtype(q), q.size(2), fused_softmax_on());
}

double blocked_attention_saved_bytes_per_token(std::int64_t t, at::ScalarType dtype, bool fused_softmax) {
  double scores = 0;  // the rows of every block times the keys up to its end
  for (std::int64_t first = 0; first < t; first += kBlockRows) {
    const std::int64_t rows = std::min(kBlockRows, t - first);
    scores += static_cast<double>(rows) * static_cast<double>(first + rows);
  }
  const double bytes = static_cast<double>(c10::elementSize(dtype)) + (fused_softmax ? 0.0 : 4.0);
  return scores / static_cast<double>(t) * bytes;
}

at::Tensor blocked_causal_attention(const at::Tensor& q_given, const at::Tensor& k_given, const at::Tensor& v_given,
                                    double scale) {
  const at::ScalarType dtype = compute_dtype(q_given);
  const at::Tensor q = q_given.to(dtype), k = k_given.to(dtype), v = v_given.to(dtype);
  const std::int64_t b = q.size(0), heads = q.size(1), t = q.size(2), d = q.size(3), kv_heads = k.size(1);
  TORCH_CHECK(heads % kv_heads == 0 && k.size(2) == t && v.size(2) == t, "blocked_causal_attention: q ", q.sizes(),
              " does not match k ", k.sizes(), " and v ", v.sizes());
  const std::int64_t group = heads / kv_heads;
  if (fused_softmax_serves(dtype)) return FusedBlockedAttention::apply(q, k, v, scale);
  const at::ScalarType softmax_type = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  std::vector<at::Tensor> blocks;
  for (std::int64_t first = 0; first < t; first += kBlockRows) {
    const std::int64_t rows = std::min(kBlockRows, t - first), keys = first + rows;
    const at::Tensor queries = stacked_rows(q, first, rows, kv_heads);
    const at::Tensor scores = at::matmul(queries, k.narrow(2, 0, keys).transpose(2, 3)) * scale +
                              diagonal_mask(first, rows, group, q.options());
    const at::Tensor probabilities = at::softmax(scores, -1, softmax_type).to(q.scalar_type());
    blocks.push_back(at::matmul(probabilities, v.narrow(2, 0, keys)).view({b, heads, rows, d}));
  }
  return at::cat(blocks, 2);
}

}  // namespace lft::model
