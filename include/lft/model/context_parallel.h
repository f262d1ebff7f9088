// Context parallelism: the ranks of a cp group each hold a chunk of every sequence of a
// micro-batch and the layers run on the chunk. Attention is where the chunks meet:
//   ulysses (DeepSpeed-Ulysses, LlamaFactory v1's cp_mode: ulysses): one contiguous chunk per
//     rank; attention exchanges it (all-to-all) for whole sequences of a share of the heads,
//     attends, and exchanges back;
//   ring (ring attention, torchtitan's load-balanced causal layout): the sequence in 2 x cp
//     pieces, rank i holding pieces i and 2cp-1-i, so every rank has as much causal work; the
//     key/value blocks travel around the group while each rank accumulates its queries' attention
//     with an online softmax, and backward sends the blocks' gradients around the ring back home.
// The per-token losses are gathered whole on every rank of the group,
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
  // Ring attention: `send` to the next rank while `recv` (the same shape) comes from the previous.
  virtual void shift(const at::Tensor& send, const at::Tensor& recv) = 0;
  virtual bool ring() const = 0;  // cp_mode: ring, else ulysses
};

// One micro-batch as a rank of the cp group sees it: the sequences padded so that each of the
// group's chunks (ring: each half chunk) is a multiple of `multiple` (padding sits after every
// real token, so causal attention never sees it), and the positions of every rank's chunk.
struct SequenceChunk {
  at::Tensor input_ids;    // [B, padded + 1]: one more pad, the last chunk's last target
  at::Tensor segment_ids;  // [B, padded] (a fresh segment for the padding), or undefined
  at::Tensor positions;    // [size, chunk] int64: the sequence positions rank r holds, in order
  at::Tensor host_positions;  // the same on the CPU (what ring attention may skip, without a sync)
  std::int64_t length = 0, padded = 0, chunk = 0;
  int rank = 0;

  at::Tensor local_positions() const;
  at::Tensor local_ids() const;
  at::Tensor local_targets() const;  // the token each position of the chunk predicts
};
SequenceChunk sequence_chunk(const SequenceExchange& group, const at::Tensor& input_ids, const at::Tensor& segment_ids,
                             std::int64_t multiple = 1);
// The chunk length of sequences of `length` tokens over `ranks` cp ranks (as sequence_chunk).
std::int64_t chunk_length(std::int64_t length, int ranks, std::int64_t multiple = 1, bool ring = false);

// What a layer's attention needs of the split (AttentionInputs::cp): the group (null: none), and
// for ring attention every rank's positions and the whole padded segment ids (undefined: none).
struct ContextSplit {
  SequenceExchange* group = nullptr;
  at::Tensor positions, host_positions, segment_ids;
};

// Ring attention of this rank's queries over every rank's keys and values: q, k, v
// [B, heads, chunk, d] (k and v with as many heads as q), causal by position, within segments
// when the split has segment ids, within `window` positions when window > 0 -> [B, heads, chunk, d].
at::Tensor ring_attention(const ContextSplit& split, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          std::int64_t window);

// Differentiable exchanges (each one's backward is the other's forward):
// [B, chunk, heads, d] (every head of this rank's chunk) -> [B, size * chunk, heads / size, d]
// (whole sequences of this rank's share of the heads).
at::Tensor sequence_to_heads(SequenceExchange& group, const at::Tensor& x);
// [B, size * chunk, heads / size, d] -> [B, chunk, heads, d].
at::Tensor heads_to_sequence(SequenceExchange& group, const at::Tensor& x);
// [B, chunk] -> [B, padded]: every rank's chunk in its positions; backward: this rank's chunk of
// the gradient (the loss over the whole is computed on every rank of the group, once each).
at::Tensor gather_sequence(SequenceExchange& group, const at::Tensor& x, const SequenceChunk& chunk);

}  // namespace lft::model
