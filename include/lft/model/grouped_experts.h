// A layer's routed experts as one autograd node: each expert's SwiGLU MLP over its contiguous rows,
// forward and backward, as grouped GEMMs over buffers of all the rows (one SwiGLU pass over every
// row; in bf16 on a CPU the groups padded so that oneDNN's per-shape kernels repeat), instead of a
// dozen autograd nodes, casts and small tensors per expert. The experts keep their own parameters
// (the Hub's layout, tensor-parallel splits, checkpoints): the node casts them into two
// compute-dtype stacks per forward ([gate | up] and down; kept for backward where the weights are
// fp32 under autocast, as autocast keeps its copies of the dense layers' weights, and stacked again
// there where they come in the compute dtype, gathered by a sharding engine), and returns each
// weight's gradient, zero for an expert no row reached, so that every parameter takes part in
// every backward (what the data-parallel engines' gradient hooks need of each rank).
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace lft::model {

// rows [R, hidden], grouped by expert: sizes[e] rows for expert e, in order (sum R). gate[e],
// up[e] [width, hidden], down[e] [hidden, width] (width may be a tensor-parallel rank's share).
// Returns down(silu(gate x) * up x) of each row, [R, hidden], in the compute dtype: autocast's
// when it is on for rows' device, else rows' dtype.
at::Tensor grouped_experts(const at::Tensor& rows, const std::vector<std::int64_t>& sizes,
                           const std::vector<at::Tensor>& gate, const std::vector<at::Tensor>& up,
                           const std::vector<at::Tensor>& down);

}  // namespace lft::model
