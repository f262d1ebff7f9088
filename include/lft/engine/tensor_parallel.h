// Tensor parallelism's communication as autograd operations (Megatron-LM, "Efficient Large-Scale
// Language Model Training", and the sequence-parallel paper "Reducing Activation Recomputation").
// Activations are [B, T, H]; `tp` is the tensor-parallel group.
//
//   copy_to_tp          f: identity forward, all-reduce of the gradient (before a column-parallel
//                       linear: every rank needs the whole input, each holds part of its gradient)
//   reduce_from_tp      g: all-reduce forward, identity backward (after a row-parallel linear)
//   gather_sequence     sequence parallel's f: all-gather along T forward, reduce-scatter backward
//   scatter_sequence    sequence parallel's g: reduce-scatter along T forward, all-gather backward
//   gather_sequence_slices  all-gather along T forward, this rank's slice of the gradient backward
//                       (values each rank computed for its tokens, then used whole and alike by all)
//   vocab_parallel_token_losses: cross-entropy over logits split along the vocabulary, never
//                       forming the whole [tokens, vocab] logits on a rank.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "lft/comm/communicator.h"

namespace lft::engine {

at::Tensor copy_to_tp(const at::Tensor& x, Communicator& tp);
at::Tensor reduce_from_tp(const at::Tensor& x, Communicator& tp);
at::Tensor gather_sequence(const at::Tensor& x, Communicator& tp);
at::Tensor scatter_sequence(const at::Tensor& x, Communicator& tp);
at::Tensor gather_sequence_slices(const at::Tensor& x, Communicator& tp);

// Per-token losses [B, T-1] (fp32) of predicting input_ids[:, t+1] from logits[:, t], where this
// rank holds `local_logits` [B, T, V_local] for vocabulary ids [vocab_start, vocab_start +
// V_local) and the ranks of `tp` together hold the whole vocabulary. Targets equal to ignore_id
// get loss 0 and no gradient. The result is the same on every rank of `tp`; its gradient
// reaches this rank's logits only.
at::Tensor vocab_parallel_token_losses(const at::Tensor& local_logits, const at::Tensor& input_ids,
                                       std::int64_t vocab_start, Communicator& tp,
                                       std::int64_t ignore_id = -100);
// The same per position: logits [B, T, V_local] predicting targets [B, T] -> [B, T].
at::Tensor vocab_parallel_target_losses(const at::Tensor& local_logits, const at::Tensor& targets,
                                        std::int64_t vocab_start, Communicator& tp, std::int64_t ignore_id = -100);

// Rows [begin, begin + count) of a dimension of `size` split in ceil(size / parts) pieces (the
// last parts may get fewer rows, or none).
struct SplitRange {
  std::int64_t begin = 0;
  std::int64_t count = 0;
};
SplitRange split_range(std::int64_t size, int parts, int index);

}  // namespace lft::engine
