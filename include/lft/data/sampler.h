// The order in which training samples are visited, and which of them each rank trains on.
//
// GlobalSampler produces one global sequence of batches determined by (seed, epoch) alone: epoch
// e visits a permutation of [0, num_samples) drawn with the project's own PRNG (splitmix64 +
// Fisher-Yates, identical on every standard library), cut into steps_per_epoch() global batches of
// global_batch samples (the incomplete last batch is dropped). The layout (dp size, micro-batch
// size, accumulation steps) only decides how local_micro_batch() splits one global batch, so any
// two layouts with the same global batch see the same samples in every optimizer step.
// With a per-rank order (dp_size > 0), epoch e follows torch's DistributedSampler instead, as
// LlamaFactory v1 draws its batches: torch.randperm(num_samples) from a generator seeded
// seed + e, cut to a multiple of dp_size, rank r taking every dp_size-th sample from r; global
// batch k is then the k-th run of global_batch / dp_size samples of each rank, rank after rank.
// LlamaFactory main's v1 leaves samples out of each rank's stream after the shuffle (those whose
// trained tokens all lie beyond cutoff_len): skip_samples() does the same, and an epoch then has
// the steps its emptiest rank fills.
#pragma once

#include <cstdint>
#include <vector>

namespace lft::data {

// What a checkpoint stores to resume the data order (checkpoint /data). num_samples and
// global_batch are checked on restore when they are non-zero (0: not recorded).
struct SamplerState {
  std::int64_t epoch = 0;
  std::int64_t step_in_epoch = 0;
  std::uint64_t seed = 0;
  std::int64_t num_samples = 0;
  std::int64_t global_batch = 0;
  std::int64_t order_dp = 0;  // 0: the global order; > 0: the per-rank order over this many ranks
};

class GlobalSampler {
 public:
  // Throws std::invalid_argument if num_samples < 0 or global_batch < 1, lft::UsageError (naming
  // both numbers) if num_samples < global_batch, i.e. not one step per epoch.
  // `per_rank_dp` > 0 selects the per-rank order over that many data-parallel ranks (it must
  // divide global_batch).
  GlobalSampler(std::int64_t num_samples, std::int64_t global_batch, std::uint64_t seed,
                int per_rank_dp = 0);

  // The global_batch sample indices of the current step.
  std::vector<std::int64_t> global_batch_indices() const;
  // Moves to the next step; after the last step of an epoch, to step 0 of the next epoch.
  void advance();
  // The per-rank order only: each rank's stream passes over the samples marked true (one flag per
  // sample), as LlamaFactory main's BatchGenerator drops them. Call before the first step.
  // Throws lft::UsageError when an epoch is left without a step.
  void skip_samples(std::vector<bool> skipped);

  std::int64_t epoch() const { return epoch_; }
  std::int64_t step_in_epoch() const { return step_; }
  std::int64_t steps_per_epoch() const { return steps_per_epoch_; }
  // Samples of all steps before the current one, over all epochs.
  std::int64_t consumed_samples() const {
    return (epoch_ * steps_per_epoch_ + step_) * global_batch_;
  }
  std::int64_t num_samples() const { return num_samples_; }
  std::int64_t global_batch() const { return global_batch_; }
  std::uint64_t seed() const { return seed_; }

  SamplerState state() const;
  // Continues from `s`. Throws lft::UsageError if its seed (or its recorded num_samples /
  // global_batch) differ from this sampler's, or its position is impossible.
  void restore(const SamplerState& s);

  // The order of epoch `epoch`: a permutation of [0, num_samples) that depends only on
  // (seed, epoch, num_samples).
  static std::vector<std::int64_t> epoch_permutation(std::int64_t num_samples, std::uint64_t seed,
                                                     std::int64_t epoch);
  // torch.randperm(num_samples) from a CPU generator seeded seed + epoch: DistributedSampler's
  // shuffle, which rank r of d deals from at positions r, r + d, ...
  static std::vector<std::int64_t> torch_permutation(std::int64_t num_samples, std::uint64_t seed,
                                                     std::int64_t epoch);
  // The per-rank order of epoch `epoch`, arranged so that global batch k is positions
  // [k * global_batch, (k + 1) * global_batch) (as many batches as every rank fills; the rest is
  // dropped). With `skipped`, each rank's stream (DistributedSampler's: the permutation padded
  // with its start to a multiple of dp_size, every dp_size-th from the rank) passes over them.
  static std::vector<std::int64_t> per_rank_order(std::int64_t num_samples, std::uint64_t seed,
                                                  std::int64_t epoch, int dp_size,
                                                  std::int64_t global_batch,
                                                  const std::vector<bool>& skipped = {});

 private:
  void set_epoch(std::int64_t epoch);

  std::int64_t num_samples_;
  std::int64_t global_batch_;
  std::uint64_t seed_;
  std::int64_t steps_per_epoch_;
  int per_rank_dp_ = 0;
  std::vector<bool> skipped_;  // skip_samples(): empty, or a flag per sample
  std::int64_t epoch_ = 0;
  std::int64_t step_ = 0;
  std::vector<std::int64_t> order_;  // epoch_permutation(num_samples_, seed_, epoch_)
};

// The samples of micro-batch `micro_index` on data-parallel rank `dp_rank`. The global batch of
// G = dp_size * accumulation_steps * micro_batch samples is split into dp_size contiguous blocks
// (rank r owns [r*G/dp_size, (r+1)*G/dp_size)); within a rank's block, micro-batch m is the m-th
// contiguous run of micro_batch samples. Throws std::invalid_argument if global_indices.size() is
// not G or an argument is out of range.
std::vector<std::int64_t> local_micro_batch(const std::vector<std::int64_t>& global_indices,
                                            int dp_rank, int dp_size, std::int64_t micro_batch,
                                            std::int64_t accumulation_steps,
                                            std::int64_t micro_index);

}  // namespace lft::data
