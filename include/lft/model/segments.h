// Neat packing (LlamaFactory's `neat_packing`): several samples share one row of a batch, told
// apart by segment ids; each token sees only the earlier tokens of its own segment, and positions
// restart at 0 in every segment, so a packed row computes what the samples would alone.
#pragma once

#include <ATen/core/Tensor.h>

namespace lft::model {

// segment_ids [B, T] (any integer dtype) -> positions [B, T] int64: the index of each token
// within its run of equal segment ids.
at::Tensor segment_positions(const at::Tensor& segment_ids);

// segment_ids [B, T] -> bool [B, 1, T, T]: query i sees key j iff j <= i and both are in the same
// segment (for at::scaled_dot_product_attention).
at::Tensor segment_causal_mask(const at::Tensor& segment_ids);

}  // namespace lft::model
