// Batches sized by tokens (`batching_strategy = "dynamic_batching"`, LlamaFactory v1's strategy of
// that name): each data-parallel rank walks its own stream of samples, torch's DistributedSampler
// order of epoch 0 (GlobalSampler::per_rank_order's deal) repeated from its start whenever it ends,
// and cuts it into micro-batches of at most `budget` = micro_batch x cutoff_len padded tokens: a
// micro-batch takes samples while (its longest sample, each at most cutoff_len) x (its count)
// stays within the budget, and closes at the sample that would exceed it or once it fills the
// budget exactly. A step takes `micro_batches` of them on every rank, so the ranks' steps hold
// different numbers of samples but about the same padded tokens. With `joined` (v1's
// dynamic_padding_free, whose micro-batches are one row of samples end to end) a micro-batch
// takes samples while the sum of their lengths (each at most cutoff_len) stays within the budget,
// and closes at the sample that would exceed it.
//
// Which samples a step takes depends only on the lengths, the seed, the ranks and the step: a
// resumed run replays the cut up to its step (no state in checkpoints).
#pragma once

#include <cstdint>
#include <vector>

namespace lft::data {

class DynamicBatches {
 public:
  // `lengths`: every sample's token count (before truncation); throws std::invalid_argument for
  // an empty dataset, dp_size < 1, or a budget below one token.
  DynamicBatches(std::vector<std::int64_t> lengths, std::uint64_t seed, int dp_size, std::int64_t micro_batch,
                 std::int64_t micro_batches, std::int64_t cutoff_len, bool joined = false);

  // The next step's micro-batches of sample indices, rank after rank: [r * micro_batches + m].
  std::vector<std::vector<std::int64_t>> next_step();
  // Moves past `steps` steps (a resumed run).
  void skip(std::int64_t steps);

 private:
  // The next micro-batch of rank r's stream.
  std::vector<std::int64_t> next_micro_batch(int rank);
  std::int64_t sample_at(int rank, std::int64_t position) const;

  std::vector<std::int64_t> lengths_;
  std::int64_t micro_batches_;
  std::int64_t cutoff_len_;
  std::int64_t budget_;
  bool joined_;
  std::vector<std::vector<std::int64_t>> streams_;  // per rank: its samples, in order
  std::vector<std::int64_t> position_;              // per rank: samples taken so far
};

}  // namespace lft::data
