// GlobalSampler (permutation per epoch, determinism, state/resume) and local_micro_batch (the
// per-rank split of one global batch).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "lft/data/sampler.h"
#include "lft/runtime/error.h"

namespace lft::data {
namespace {

bool is_permutation_of_range(std::vector<std::int64_t> v, std::int64_t n) {
  if (static_cast<std::int64_t>(v.size()) != n) return false;
  std::sort(v.begin(), v.end());
  for (std::int64_t i = 0; i < n; ++i) {
    if (v[static_cast<std::size_t>(i)] != i) return false;
  }
  return true;
}

// Every global batch of one epoch, in order.
std::vector<std::int64_t> one_epoch(GlobalSampler& s) {
  std::vector<std::int64_t> all;
  const std::int64_t epoch = s.epoch();
  for (std::int64_t k = 0; k < s.steps_per_epoch(); ++k) {
    EXPECT_EQ(s.epoch(), epoch);
    EXPECT_EQ(s.step_in_epoch(), k);
    const std::vector<std::int64_t> b = s.global_batch_indices();
    all.insert(all.end(), b.begin(), b.end());
    s.advance();
  }
  return all;
}

TEST(SamplerTest, EpochIsAPermutation) {
  for (const std::int64_t n : {1, 2, 7, 64, 1000}) {
    EXPECT_TRUE(is_permutation_of_range(GlobalSampler::epoch_permutation(n, 42, 0), n)) << n;
    EXPECT_TRUE(is_permutation_of_range(GlobalSampler::epoch_permutation(n, 42, 5), n)) << n;
  }
  GlobalSampler s(100, 10, 7);
  EXPECT_TRUE(is_permutation_of_range(one_epoch(s), 100));
  EXPECT_TRUE(is_permutation_of_range(one_epoch(s), 100));
}

TEST(SamplerTest, DropsTheIncompleteLastBatch) {
  GlobalSampler s(103, 10, 7);
  EXPECT_EQ(s.steps_per_epoch(), 10);
  const std::vector<std::int64_t> seen = one_epoch(s);
  EXPECT_EQ(seen.size(), 100u);
  EXPECT_EQ(std::set<std::int64_t>(seen.begin(), seen.end()).size(), 100u);
  // The 100 samples are the first 100 of the epoch's permutation.
  const std::vector<std::int64_t> perm = GlobalSampler::epoch_permutation(103, 7, 0);
  EXPECT_TRUE(std::equal(seen.begin(), seen.end(), perm.begin()));
  EXPECT_EQ(s.epoch(), 1);
  EXPECT_EQ(GlobalSampler(10, 10, 0).steps_per_epoch(), 1);
  EXPECT_EQ(GlobalSampler(19, 10, 0).steps_per_epoch(), 1);
  EXPECT_EQ(GlobalSampler(20, 10, 0).steps_per_epoch(), 2);
}

TEST(SamplerTest, IsDeterministic) {
  GlobalSampler a(500, 16, 1234);
  GlobalSampler b(500, 16, 1234);
  for (int k = 0; k < 100; ++k) {  // crosses epoch boundaries (31 steps per epoch)
    ASSERT_EQ(a.global_batch_indices(), b.global_batch_indices()) << "step " << k;
    a.advance();
    b.advance();
  }
}

// The permutation is fixed by our own PRNG, so it is the same on every standard library; these
// values (also computed by an independent Python transcription) pin it so an accidental change of the order (which would change every resumed run) shows.
TEST(SamplerTest, OrderIsPinned) {
  const std::vector<std::int64_t> p = GlobalSampler::epoch_permutation(10, 42, 0);
  const std::vector<std::int64_t> q = GlobalSampler::epoch_permutation(10, 42, 1);
  std::string ps;
  std::string qs;
  for (const auto v : p) ps += std::to_string(v) + " ";
  for (const auto v : q) qs += std::to_string(v) + " ";
  EXPECT_EQ(ps, "7 4 9 2 8 1 6 0 3 5 ");
  EXPECT_EQ(qs, "9 6 3 1 0 2 4 5 8 7 ");
}

TEST(SamplerTest, EpochsAndSeedsDiffer) {
  const auto e0 = GlobalSampler::epoch_permutation(1000, 42, 0);
  const auto e1 = GlobalSampler::epoch_permutation(1000, 42, 1);
  const auto e2 = GlobalSampler::epoch_permutation(1000, 42, 2);
  const auto other_seed = GlobalSampler::epoch_permutation(1000, 43, 0);
  std::vector<std::int64_t> identity(1000);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(e0, e1);
  EXPECT_NE(e1, e2);
  EXPECT_NE(e0, e2);
  EXPECT_NE(e0, other_seed);
  EXPECT_NE(e0, identity);

  GlobalSampler s(64, 8, 42);
  const std::vector<std::int64_t> first = one_epoch(s);
  const std::vector<std::int64_t> second = one_epoch(s);
  EXPECT_NE(first, second);
  EXPECT_TRUE(is_permutation_of_range(second, 64));
}

TEST(SamplerTest, EpochRolloverAndConsumedSamples) {
  GlobalSampler s(25, 4, 9);  // 6 steps per epoch, 1 sample dropped per epoch
  ASSERT_EQ(s.steps_per_epoch(), 6);
  EXPECT_EQ(s.consumed_samples(), 0);
  for (int k = 0; k < 5; ++k) s.advance();
  EXPECT_EQ(s.epoch(), 0);
  EXPECT_EQ(s.step_in_epoch(), 5);
  EXPECT_EQ(s.consumed_samples(), 20);
  s.advance();
  EXPECT_EQ(s.epoch(), 1);
  EXPECT_EQ(s.step_in_epoch(), 0);
  EXPECT_EQ(s.consumed_samples(), 24);
  const auto perm1 = GlobalSampler::epoch_permutation(25, 9, 1);
  EXPECT_EQ(s.global_batch_indices(), std::vector<std::int64_t>(perm1.begin(), perm1.begin() + 4));
  for (int k = 0; k < 6 * 3; ++k) s.advance();
  EXPECT_EQ(s.epoch(), 4);
  EXPECT_EQ(s.step_in_epoch(), 0);
  EXPECT_EQ(s.consumed_samples(), 4 * 24);
}

TEST(SamplerTest, TooFewSamplesIsAUsageError) {
  try {
    GlobalSampler s(5, 8, 0);
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("5 sequences"), std::string::npos) << msg;
    EXPECT_NE(msg.find("global batch of 8"), std::string::npos) << msg;
  }
  EXPECT_THROW(GlobalSampler(0, 1, 0), UsageError);
  EXPECT_THROW(GlobalSampler(10, 0, 0), std::invalid_argument);
  EXPECT_THROW(GlobalSampler(-1, 1, 0), std::invalid_argument);
}

TEST(SamplerTest, StateRoundTripAndResumeEquality) {
  GlobalSampler run(50, 6, 77);  // 8 steps per epoch
  for (int k = 0; k < 13; ++k) run.advance();
  const SamplerState st = run.state();
  EXPECT_EQ(st.epoch, 1);
  EXPECT_EQ(st.step_in_epoch, 5);
  EXPECT_EQ(st.seed, 77u);
  EXPECT_EQ(st.num_samples, 50);
  EXPECT_EQ(st.global_batch, 6);

  GlobalSampler resumed(50, 6, 77);
  resumed.restore(st);
  EXPECT_EQ(resumed.epoch(), 1);
  EXPECT_EQ(resumed.step_in_epoch(), 5);
  EXPECT_EQ(resumed.consumed_samples(), run.consumed_samples());
  for (int k = 0; k < 30; ++k) {
    ASSERT_EQ(resumed.global_batch_indices(), run.global_batch_indices()) << "step " << k;
    run.advance();
    resumed.advance();
  }
  // Restoring into a sampler that is already further along also works (back to epoch 0).
  GlobalSampler back(50, 6, 77);
  const auto first = back.global_batch_indices();
  for (int k = 0; k < 20; ++k) back.advance();
  back.restore(SamplerState{0, 0, 77});
  EXPECT_EQ(back.global_batch_indices(), first);
}

TEST(SamplerTest, RestoreRejectsAnotherRun) {
  GlobalSampler s(50, 6, 77);
  try {
    s.restore(SamplerState{0, 1, 78});
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("seed = 78"), std::string::npos) << msg;
    EXPECT_NE(msg.find("seed = 77"), std::string::npos) << msg;
  }
  SamplerState other_data{0, 1, 77};
  other_data.num_samples = 51;
  EXPECT_THROW(s.restore(other_data), UsageError);
  SamplerState other_batch{0, 1, 77};
  other_batch.global_batch = 5;
  EXPECT_THROW(s.restore(other_batch), UsageError);
  EXPECT_THROW(s.restore(SamplerState{0, 8, 77}), UsageError);  // only steps 0..7 exist
  EXPECT_THROW(s.restore(SamplerState{-1, 0, 77}), UsageError);
  // A failed restore leaves the sampler where it was.
  EXPECT_EQ(s.epoch(), 0);
  EXPECT_EQ(s.step_in_epoch(), 0);
}

TEST(SamplerTest, LocalMicroBatchIsContiguousBlocks) {
  const std::vector<std::int64_t> g = {10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21};
  // dp 2, accumulation 3, micro 2: rank 0 owns g[0..6), rank 1 g[6..12).
  EXPECT_EQ(local_micro_batch(g, 0, 2, 2, 3, 0), (std::vector<std::int64_t>{10, 11}));
  EXPECT_EQ(local_micro_batch(g, 0, 2, 2, 3, 2), (std::vector<std::int64_t>{14, 15}));
  EXPECT_EQ(local_micro_batch(g, 1, 2, 2, 3, 0), (std::vector<std::int64_t>{16, 17}));
  EXPECT_EQ(local_micro_batch(g, 1, 2, 2, 3, 2), (std::vector<std::int64_t>{20, 21}));
  EXPECT_EQ(local_micro_batch(g, 0, 1, 12, 1, 0), g);
}

TEST(SamplerTest, LocalMicroBatchRejectsMismatches) {
  const std::vector<std::int64_t> g(12, 0);
  EXPECT_THROW(local_micro_batch(g, 0, 2, 2, 2, 0), std::invalid_argument);  // G = 8
  EXPECT_THROW(local_micro_batch(g, 2, 2, 2, 3, 0), std::invalid_argument);  // rank
  EXPECT_THROW(local_micro_batch(g, -1, 2, 2, 3, 0), std::invalid_argument);
  EXPECT_THROW(local_micro_batch(g, 0, 2, 2, 3, 3), std::invalid_argument);  // micro index
  EXPECT_THROW(local_micro_batch(g, 0, 0, 2, 3, 0), std::invalid_argument);
  EXPECT_THROW(local_micro_batch(g, 0, 2, 0, 3, 0), std::invalid_argument);
}

// The same seed gives the same global batches whatever the layout, and the union over ranks and
// micro-batches of local_micro_batch is exactly the global batch, each sample once.
TEST(SamplerTest, SameOrderRegardlessOfDataParallelSplit) {
  constexpr std::int64_t kGlobal = 24;
  struct Layout {
    int dp;
    std::int64_t micro;
    std::int64_t accum;
  };
  const std::vector<Layout> layouts = {{1, 24, 1}, {1, 4, 6}, {2, 12, 1}, {2, 3, 4},
                                       {3, 8, 1},  {3, 2, 4}, {4, 6, 1},  {4, 1, 6}};
  GlobalSampler reference(200, kGlobal, 2024);
  std::vector<GlobalSampler> samplers;
  for (std::size_t l = 0; l < layouts.size(); ++l) samplers.emplace_back(200, kGlobal, 2024);
  for (int step = 0; step < 20; ++step) {  // 8 steps per epoch: crosses two epoch boundaries
    const std::vector<std::int64_t> expected = reference.global_batch_indices();
    for (std::size_t l = 0; l < layouts.size(); ++l) {
      const Layout& lay = layouts[l];
      ASSERT_EQ(lay.dp * lay.micro * lay.accum, kGlobal);
      const std::vector<std::int64_t> global = samplers[l].global_batch_indices();
      ASSERT_EQ(global, expected) << "layout " << l << " step " << step;
      std::vector<std::int64_t> gathered;  // rank-major, then micro-batch order
      for (int r = 0; r < lay.dp; ++r) {
        for (std::int64_t m = 0; m < lay.accum; ++m) {
          const auto part = local_micro_batch(global, r, lay.dp, lay.micro, lay.accum, m);
          ASSERT_EQ(static_cast<std::int64_t>(part.size()), lay.micro);
          gathered.insert(gathered.end(), part.begin(), part.end());
        }
      }
      EXPECT_EQ(gathered, expected) << "dp " << lay.dp << " micro " << lay.micro << " accum "
                                    << lay.accum;
      samplers[l].advance();
    }
    reference.advance();
  }
}

}  // namespace
}  // namespace lft::data
