#include "lft/model/segments.h"

#include <ATen/ATen.h>

namespace lft::model {

at::Tensor segment_positions(const at::Tensor& segment_ids) {
  TORCH_CHECK(segment_ids.dim() == 2, "segment_positions: segment_ids must be [B, T], got ",
              segment_ids.sizes());
  const at::Tensor ids = segment_ids.to(at::kLong).cpu().contiguous();
  at::Tensor positions = at::empty(ids.sizes(), ids.options());
  const std::int64_t b = ids.size(0), t = ids.size(1);
  const std::int64_t* in = ids.data_ptr<std::int64_t>();
  std::int64_t* out = positions.data_ptr<std::int64_t>();
  for (std::int64_t r = 0; r < b; ++r)
    for (std::int64_t i = 0; i < t; ++i) {
      const std::int64_t k = r * t + i;
      out[k] = (i > 0 && in[k] == in[k - 1]) ? out[k - 1] + 1 : 0;
    }
  return positions.to(segment_ids.device());
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
