// batching_strategy = "dynamic_batching" (data/dynamic_batches.h): LlamaFactory v1's token-budget
// cut of each rank's stream. Its losses against v1 itself: tests/e2e/v1_parity.sh (dynamic_*).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "lft/data/dynamic_batches.h"
#include "lft/data/sampler.h"

namespace lft::data {
namespace {

// 37 samples of lengths 1..300 in a fixed scramble; cutoff 128, budget 2 x 128.
std::vector<std::int64_t> lengths() {
  std::vector<std::int64_t> l;
  for (std::int64_t i = 0; i < 37; ++i) l.push_back(1 + (i * 97 + 13) % 300);
  return l;
}

TEST(DynamicBatches, EachRankCutsItsDistributedSamplerStreamByTheTokenBudget) {
  const std::vector<std::int64_t> len = lengths();
  const std::int64_t cutoff = 128, budget = 2 * cutoff, steps = 12, micro_batches = 3;
  const int dp = 2;
  DynamicBatches batches(len, /*seed=*/42, dp, /*micro_batch=*/2, micro_batches, cutoff);
  const std::vector<std::int64_t> perm = GlobalSampler::torch_permutation(37, 42, 0);
  std::vector<std::vector<std::int64_t>> taken(dp);  // per rank, every sample in step order
  std::vector<std::vector<std::vector<std::int64_t>>> cuts(dp);
  for (std::int64_t k = 0; k < steps; ++k) {
    const auto step = batches.next_step();
    ASSERT_EQ(step.size(), static_cast<std::size_t>(dp * micro_batches));
    for (int r = 0; r < dp; ++r)
      for (std::int64_t m = 0; m < micro_batches; ++m) {
        const auto& mb = step[static_cast<std::size_t>(r * micro_batches + m)];
        ASSERT_FALSE(mb.empty());
        taken[r].insert(taken[r].end(), mb.begin(), mb.end());
        cuts[r].push_back(mb);
      }
  }
  auto clipped = [&](std::int64_t sample) { return std::min(len[static_cast<std::size_t>(sample)], cutoff); };
  for (int r = 0; r < dp; ++r) {
    // The stream: DistributedSampler's deal of epoch 0 (18 samples each, one dropped), repeated.
    for (std::size_t i = 0; i < taken[r].size(); ++i)
      EXPECT_EQ(taken[r][i], perm[(i % 18) * dp + static_cast<std::size_t>(r)]) << "rank " << r << " sample " << i;
    // Each micro-batch fits the budget padded (or is one sample), and closes where v1's does: it
    // filled the budget, or the stream's next sample would overflow it.
    std::size_t at = 0;
    for (const auto& mb : cuts[r]) {
      std::int64_t longest = 0;
      for (const std::int64_t sample : mb) longest = std::max(longest, clipped(sample));
      EXPECT_LE(longest * static_cast<std::int64_t>(mb.size()), budget);
      at += mb.size();
      const std::int64_t next = perm[(at % 18) * dp + static_cast<std::size_t>(r)];
      const bool filled = longest * static_cast<std::int64_t>(mb.size()) >= budget;
      const bool overflows = std::max(longest, clipped(next)) * static_cast<std::int64_t>(mb.size() + 1) > budget;
      EXPECT_TRUE(filled || overflows);
    }
  }
  // A resumed run replays the cut: skip(k) then next_step() is the (k+1)-th step.
  DynamicBatches again(len, 42, dp, 2, micro_batches, cutoff);
  again.skip(steps - 1);
  DynamicBatches fresh(len, 42, dp, 2, micro_batches, cutoff);
  std::vector<std::vector<std::int64_t>> last;
  for (std::int64_t k = 0; k < steps; ++k) last = fresh.next_step();
  EXPECT_EQ(again.next_step(), last);
}

TEST(DynamicBatches, JoinedRowsFillTheBudgetWithTheSamplesLengths) {
  // v1's dynamic_padding_free: a row takes samples while their lengths (each at most cutoff_len)
  // sum to at most the budget, and closes at the sample that would overflow it.
  const std::vector<std::int64_t> len = lengths();
  const std::int64_t cutoff = 128, budget = 2 * cutoff;
  DynamicBatches batches(len, 42, 1, 2, 4, cutoff, /*joined=*/true);
  const std::vector<std::int64_t> perm = GlobalSampler::torch_permutation(37, 42, 0);
  auto clipped = [&](std::int64_t sample) { return std::min(len[static_cast<std::size_t>(sample)], cutoff); };
  std::size_t at = 0;
  bool several = false;
  for (std::int64_t k = 0; k < 6; ++k)
    for (const auto& row : batches.next_step()) {
      std::int64_t tokens = 0;
      for (const std::int64_t sample : row) {
        EXPECT_EQ(sample, perm[at++ % 37]);
        tokens += clipped(sample);
      }
      EXPECT_LE(tokens, budget);
      EXPECT_GT(tokens + clipped(perm[at % 37]), budget);
      several = several || row.size() > 2;  // what the padded rule could not take
    }
  EXPECT_TRUE(several);
}

TEST(DynamicBatches, ShortSamplesShareAMicroBatchLongOnesGoAlone) {
  // {length, cutoff_len, micro_batch, samples a micro-batch}: 64-token samples fill a budget of
  // 2 x 128 four at a time; 200 alone in a budget of 256; 200 cut to 128 twice in 2 x 128.
  struct Case {
    std::int64_t length, cutoff, micro;
    std::size_t per_micro_batch;
  };
  for (const Case& c : {Case{64, 128, 2, 4}, Case{200, 256, 1, 1}, Case{200, 128, 2, 2}}) {
    DynamicBatches batches(std::vector<std::int64_t>(10, c.length), 7, 1, c.micro, 2, c.cutoff);
    for (const auto& mb : batches.next_step()) EXPECT_EQ(mb.size(), c.per_micro_batch) << c.length << " " << c.cutoff;
  }
  EXPECT_THROW(DynamicBatches({5}, 7, 2, 2, 1, 128), std::invalid_argument);  // one sample, two ranks
}

}  // namespace
}  // namespace lft::data
