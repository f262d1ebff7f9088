#include "lft/data/dynamic_batches.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "lft/data/sampler.h"

namespace lft::data {

DynamicBatches::DynamicBatches(std::vector<std::int64_t> lengths, std::uint64_t seed, int dp_size,
                               std::int64_t micro_batch, std::int64_t micro_batches, std::int64_t cutoff_len,
                               bool joined)
    : lengths_(std::move(lengths)), micro_batches_(micro_batches), cutoff_len_(cutoff_len),
      budget_(micro_batch * cutoff_len), joined_(joined) {
  const auto n = static_cast<std::int64_t>(lengths_.size());
  if (dp_size < 1 || micro_batches < 1 || budget_ < 1)
    throw std::invalid_argument("DynamicBatches: needs dp_size, micro_batches and micro_batch x cutoff_len >= 1");
  if (n / dp_size < 1)
    throw std::invalid_argument("DynamicBatches: " + std::to_string(n) + " samples for " + std::to_string(dp_size) +
                                " data-parallel ranks: each needs at least one");
  // DistributedSampler with drop_last: the first (n / d) d of the permutation, rank r every d-th.
  const std::vector<std::int64_t> perm = GlobalSampler::torch_permutation(n, seed, 0);
  streams_.resize(static_cast<std::size_t>(dp_size));
  for (std::int64_t j = 0; j < n / dp_size; ++j)
    for (int r = 0; r < dp_size; ++r) streams_[static_cast<std::size_t>(r)].push_back(perm[static_cast<std::size_t>(j * dp_size + r)]);
  position_.assign(static_cast<std::size_t>(dp_size), 0);
}

std::int64_t DynamicBatches::sample_at(int rank, std::int64_t position) const {
  const auto& stream = streams_[static_cast<std::size_t>(rank)];
  return stream[static_cast<std::size_t>(position % static_cast<std::int64_t>(stream.size()))];
}

std::vector<std::int64_t> DynamicBatches::next_micro_batch(int rank) {
  std::int64_t& at = position_[static_cast<std::size_t>(rank)];
  std::vector<std::int64_t> taken;
  if (joined_) {  // v1's _get_dynamic_padding_free_micro_batch_sizes over the endless stream
    std::int64_t tokens = 0;
    for (;;) {
      const std::int64_t sample = sample_at(rank, at);
      const std::int64_t length = std::min(lengths_[static_cast<std::size_t>(sample)], cutoff_len_);
      // Never at the first sample (length <= cutoff_len <= budget); a budget's worth of samples at
      // most, should some have no token.
      if (tokens + length > budget_ || static_cast<std::int64_t>(taken.size()) >= budget_) break;
      tokens += length;
      taken.push_back(sample);
      ++at;
    }
    return taken;
  }
  // v1's _get_dynamic_micro_batch_sizes over an endless stream (it restarts the sampler at the end).
  std::int64_t longest = 0;
  for (;;) {
    const std::int64_t sample = sample_at(rank, at);
    const std::int64_t length = std::min(lengths_[static_cast<std::size_t>(sample)], cutoff_len_);
    const auto count = static_cast<std::int64_t>(taken.size());
    if (count > 0 && std::max(longest, length) * (count + 1) > budget_) break;
    longest = std::max(longest, length);
    taken.push_back(sample);
    ++at;
    if (longest * (count + 1) >= budget_) break;
  }
  return taken;
}

std::vector<std::vector<std::int64_t>> DynamicBatches::next_step() {
  std::vector<std::vector<std::int64_t>> step;
  for (int r = 0; r < static_cast<int>(streams_.size()); ++r)
    for (std::int64_t m = 0; m < micro_batches_; ++m) step.push_back(next_micro_batch(r));
  return step;
}

void DynamicBatches::skip(std::int64_t steps) {
  for (std::int64_t k = 0; k < steps; ++k) next_step();
}

}  // namespace lft::data
