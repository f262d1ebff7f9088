// Per-token causal-LM loss.
#include "lft/model/loss.h"

#include <ATen/ATen.h>

#include "lft/model/fused.h"

namespace lft::model {

at::Tensor token_losses(const at::Tensor& logits, const at::Tensor& input_ids,
                        std::int64_t ignore_id) {
  TORCH_CHECK(logits.dim() == 3, "token_losses: logits must be [B, T, V], got ", logits.sizes());
  TORCH_CHECK(input_ids.dim() == 2 && input_ids.size(0) == logits.size(0) &&
                  input_ids.size(1) == logits.size(1),
              "token_losses: input_ids ", input_ids.sizes(), " do not match logits ",
              logits.sizes());
  const std::int64_t b = logits.size(0), t = logits.size(1);
  if (t < 2) return at::zeros({b, 0}, logits.options().dtype(at::kFloat));
  if (at::Tensor fused = fused_token_losses(logits, input_ids, ignore_id); fused.defined()) return fused;
  return target_losses(logits.narrow(1, 0, t - 1), input_ids.narrow(1, 1, t - 1), ignore_id);
}

at::Tensor target_losses(const at::Tensor& logits, const at::Tensor& targets, std::int64_t ignore_id) {
  const std::int64_t b = logits.size(0), t = logits.size(1), v = logits.size(2);
  // reduction none (0), ignore_index -> 0 for padded targets, no label smoothing.
  return at::cross_entropy_loss(logits.to(at::kFloat).reshape({-1, v}), targets.to(at::kLong).reshape({-1}),
                                /*weight=*/{}, /*reduction=*/0, ignore_id, 0.0)
      .view({b, t});
}

at::Tensor target_mask(const at::Tensor& input_ids, std::int64_t ignore_id) {
  TORCH_CHECK(input_ids.dim() == 2, "target_mask: input_ids must be [B, T], got ",
              input_ids.sizes());
  const std::int64_t t = input_ids.size(1);
  if (t < 2) return at::zeros({input_ids.size(0), 0}, input_ids.options().dtype(at::kBool));
  return input_ids.narrow(1, 1, t - 1).ne(ignore_id);
}

}  // namespace lft::model
