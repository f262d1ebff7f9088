// Ulysses context parallelism (DeepSpeed-Ulysses, LlamaFactory v1's cp_mode: ulysses): the ranks
// of a cp group each hold one contiguous chunk of every sequence of a micro-batch. The layers run
// on the chunk; attention exchanges it (all-to-all) for whole sequences of a share of the heads,
// attends, and exchanges back. The per-token losses are gathered whole on every rank of the group,
// and their backward takes each rank's own chunk, so a loss over whole sequences (the token sums,
// DPO's pair terms) is computed once per rank as one rank computes it, and the engine's sum of
// gradients over dp x cp is the one-rank gradient.
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace lft::model {

// The cp group's two collectives on the model's device, blocking. The trainer implements them
// over the mesh's cp communicator (counted and watchdog-guarded as every collective).
class SequenceExchange {
 public:
  virtual ~SequenceExchange() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  // `blocks` (contiguous, size() equal blocks back to back): block r goes to rank r; the result
  // holds the block each rank r sent here at position r.
  virtual at::Tensor all_to_all(const at::Tensor& blocks) = 0;
  // `piece` from every rank, back to back in rank order.
  virtual at::Tensor all_gather(const at::Tensor& piece) = 0;
};

// One micro-batch as a rank of the cp group sees it: the sequences padded so that each of the
// group's chunks is a multiple of `multiple` (padding sits after every real token, so causal
// attention never sees it), and this rank's chunk [begin, begin + chunk) of them.
struct SequenceChunk {
  at::Tensor input_ids;    // [B, padded + 1]: one more pad, the last chunk's last target
  at::Tensor segment_ids;  // [B, padded] (a fresh segment for the padding), or undefined
  std::int64_t length = 0, padded = 0, begin = 0, chunk = 0;

  at::Tensor local_ids() const { return input_ids.narrow(1, begin, chunk).contiguous(); }
  // The token each position of the chunk predicts.
  at::Tensor local_targets() const { return input_ids.narrow(1, begin + 1, chunk).contiguous(); }
};
SequenceChunk sequence_chunk(const SequenceExchange& group, const at::Tensor& input_ids, const at::Tensor& segment_ids,
                             std::int64_t multiple = 1);
// The chunk length of sequences of `length` tokens over `ranks` cp ranks (as sequence_chunk).
std::int64_t chunk_length(std::int64_t length, int ranks, std::int64_t multiple = 1);

// Differentiable exchanges (each one's backward is the other's forward):
// [B, chunk, heads, d] (every head of this rank's chunk) -> [B, size * chunk, heads / size, d]
// (whole sequences of this rank's share of the heads).
at::Tensor sequence_to_heads(SequenceExchange& group, const at::Tensor& x);
// [B, size * chunk, heads / size, d] -> [B, chunk, heads, d].
at::Tensor heads_to_sequence(SequenceExchange& group, const at::Tensor& x);
// [B, chunk] -> [B, size * chunk], every rank's chunk in order; backward: this rank's chunk of
// the gradient (the loss over the whole is computed on every rank of the group, once each).
at::Tensor gather_sequence(SequenceExchange& group, const at::Tensor& x);

}  // namespace lft::model
