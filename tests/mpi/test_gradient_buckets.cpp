// GradientBuckets, the data-parallel all-reduce of ddp and megatron, on real MPI ranks: buckets
// are launched from backward hooks (in flight when backward returns, before finish), at each
// parameter's last backward of the step, and finish leaves every parameter's gradient the sum
// over the ranks, including a parameter that had no gradient in the last backward.
#include <ATen/ATen.h>

#include <vector>

#include "lft/engine/gradient_buckets.h"
#include "mpi_test_util.h"

namespace lft {
namespace {

using test::world;

// Three parameters of 1000 fp32 elements (4000 bytes each); buckets of 4096 bytes hold one each.
std::vector<at::Tensor> make_params() {
  std::vector<at::Tensor> params;
  for (int i = 0; i < 3; ++i) params.push_back(at::zeros({1000}, at::kFloat).requires_grad_(true));
  return params;
}

// d/dp of sum(p * x) is x: rank r's gradient of parameter i in backward pass k is (r + 1) * (i + 1) * (k + 1).
at::Tensor loss_of(const std::vector<at::Tensor>& params, int pass, bool use_last) {
  at::Tensor loss = at::zeros({}, at::kFloat);
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!use_last && i + 1 == params.size()) continue;
    const double x = (world().rank() + 1) * static_cast<double>(i + 1) * (pass + 1);
    loss = loss + (params[i] * x).sum();
  }
  return loss;
}

// sum over ranks of (r + 1) = n (n + 1) / 2.
double rank_sum() { return world().size() * (world().size() + 1) / 2.0; }

TEST(GradientBuckets, LaunchedDuringBackwardAndSummedOverRanks) {
  if (world().size() < 2) GTEST_SKIP() << "runs at 2 or more ranks";
  std::vector<at::Tensor> params = make_params();
  engine::GradientBuckets buckets(world(), params, 4096);
  ASSERT_EQ(buckets.bucket_count(), 3u);
  buckets.expect_backwards(1);
  loss_of(params, 0, true).backward();
  EXPECT_EQ(buckets.buckets_in_flight(), 3u) << "every bucket launched by the hooks, before finish";
  buckets.finish();
  EXPECT_EQ(buckets.buckets_in_flight(), 0u);
  for (std::size_t i = 0; i < params.size(); ++i)
    EXPECT_TRUE(at::allclose(params[i].grad(), at::full({1000}, rank_sum() * (i + 1), at::kFloat))) << i;
}

TEST(GradientBuckets, ReducesAtTheLastBackwardWhatEarlierOnesAccumulated) {
  if (world().size() < 2) GTEST_SKIP() << "runs at 2 or more ranks";
  std::vector<at::Tensor> params = make_params();
  engine::GradientBuckets buckets(world(), params, 4096);
  buckets.expect_backwards(2);
  loss_of(params, 0, true).backward();
  EXPECT_EQ(buckets.buckets_in_flight(), 0u) << "nothing is final after the first of two backward passes";
  // The second pass leaves the last parameter out: its bucket goes at finish with what it has.
  loss_of(params, 1, false).backward();
  EXPECT_EQ(buckets.buckets_in_flight(), 2u);
  buckets.finish();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const double passes = i + 1 == params.size() ? 1.0 : 1.0 + 2.0;  // pass k contributes (k + 1)
    EXPECT_TRUE(at::allclose(params[i].grad(), at::full({1000}, rank_sum() * (i + 1) * passes, at::kFloat))) << i;
  }
}

TEST(GradientBuckets, NoSyncBackwardsOnlyAccumulate) {
  if (world().size() < 2) GTEST_SKIP() << "runs at 2 or more ranks";
  std::vector<at::Tensor> params = make_params();
  engine::GradientBuckets buckets(world(), params, 4096);
  buckets.expect_backwards(0);  // ddp's no_sync micro-batch
  loss_of(params, 0, true).backward();
  EXPECT_EQ(buckets.buckets_in_flight(), 0u);
  buckets.expect_backwards(1);
  loss_of(params, 1, true).backward();
  EXPECT_EQ(buckets.buckets_in_flight(), 3u);
  buckets.finish();
  for (std::size_t i = 0; i < params.size(); ++i)
    EXPECT_TRUE(at::allclose(params[i].grad(), at::full({1000}, rank_sum() * (i + 1) * 3.0, at::kFloat))) << i;
}

}  // namespace
}  // namespace lft
