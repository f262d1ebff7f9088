#include "lft/model/segments.h"

#include <ATen/ATen.h>

namespace lft::model {

at::Tensor segment_positions(const at::Tensor& segment_ids) {
  TORCH_CHECK(segment_ids.dim() == 2, "segment_positions: segment_ids must be [B, T], got ",
              segment_ids.sizes());
  // Position i counts from the start of its segment: i minus the last index <= i where a new
  // segment starts. Tensor ops on the ids' device, so a GPU batch needs no host round trip.
  const at::Tensor ids = segment_ids.to(at::kLong);
  const std::int64_t t = ids.size(1);
  const at::Tensor index = at::arange(t, ids.options()).unsqueeze(0).expand_as(ids);
  at::Tensor starts = at::ones_like(ids, ids.options().dtype(at::kBool));
  if (t > 1) starts.narrow(1, 1, t - 1).copy_(ids.narrow(1, 1, t - 1) != ids.narrow(1, 0, t - 1));
  const at::Tensor last_start = std::get<0>(at::cummax(at::where(starts, index, at::zeros_like(index)), 1));
  return index - last_start;
}

at::Tensor segment_causal_mask(const at::Tensor& segment_ids) {
  TORCH_CHECK(segment_ids.dim() == 2, "segment_causal_mask: segment_ids must be [B, T], got ",
              segment_ids.sizes());
  const std::int64_t t = segment_ids.size(1);
  const at::Tensor same = segment_ids.unsqueeze(2) == segment_ids.unsqueeze(1);  // [B, T, T]
  const at::Tensor causal = at::ones({t, t}, segment_ids.options().dtype(at::kBool)).tril();
  return at::logical_and(same, causal).unsqueeze(1);
}

}  // namespace lft::model
