// Eager soft-capped attention, operation for operation as transformers' eager_attention_forward.
#include "lft/model/eager_attention.h"

#include <limits>

#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

namespace lft::model {

namespace {

// torch.finfo(dtype).min
at::Scalar lowest(at::ScalarType dtype) {
  if (dtype == at::kBFloat16) return at::Scalar(std::numeric_limits<c10::BFloat16>::lowest());
  if (dtype == at::kHalf) return at::Scalar(std::numeric_limits<c10::Half>::lowest());
  if (dtype == at::kDouble) return at::Scalar(std::numeric_limits<double>::lowest());
  return at::Scalar(std::numeric_limits<float>::lowest());
}

}  // namespace

at::Tensor softcapped_attention(const at::Tensor& q, at::Tensor k, at::Tensor v, const std::optional<at::Tensor>& mask,
                                bool causal, double scale, double softcap) {
  const std::int64_t heads = q.size(1), kv_heads = k.size(1), t = q.size(2), t_k = k.size(2);
  if (kv_heads != heads) {
    k = k.repeat_interleave(heads / kv_heads, 1);
    v = v.repeat_interleave(heads / kv_heads, 1);
  }
  at::Tensor scores = at::matmul(q, k.transpose(2, 3)) * scale;
  scores = at::tanh(scores / softcap) * softcap;
  at::Tensor visible;
  if (mask) {
    visible = *mask;
  } else if (causal) {
    visible = at::ones({t, t_k}, q.options().dtype(at::kBool)).tril(t_k - t);
  }
  // transformers adds the dtype's lowest value where a key is hidden: a row never ends up empty.
  if (visible.defined()) scores = scores.masked_fill(visible.logical_not(), lowest(scores.scalar_type()));
  const at::Tensor probabilities = at::softmax(scores, -1, at::kFloat).to(q.scalar_type());
  return at::matmul(probabilities, v);
}

}  // namespace lft::model
