// ddp at 2, 3 and 4 ranks against the one-rank reference computed in the same run (each rank
// computes it alone over MPI_COMM_SELF): same global batch of 24 sequences, micro-batch 2,
// 1 thread per rank. Step 1 is bitwise equal (per-sequence losses are summed in one fixed global
// order); later steps within 1e-5 relative (all-reduce sums gradients in another order).
#include <ATen/Parallel.h>

#include "lft/config/config.h"
#include "lft/engine/run_plan.h"
#include "lft/train/trainer.h"
#include "mpi_test_util.h"
#include "trainer_util.h"
#include "tiny_run.h"

namespace lft {
namespace {

using test::tiny_run;
using test::world;

TEST(DdpParity, MatchesOneRankReferenceOnTheSameGlobalBatch) {
  const int n = world().size();
  if (n == 1 || 24 % (2 * n) != 0) GTEST_SKIP() << "runs at 2, 3 and 4 ranks (global batch 24 = 2 x accum x ranks)";
  at::set_num_threads(1);
  MpiCommunicator self(MPI_COMM_SELF, "self", false);
  const auto reference = test::train_losses(tiny_run("none", 2, 12), self, 20);
  const auto ddp = test::train_losses(tiny_run("ddp", 2, 24 / (2 * n)), world(), 20);
  ASSERT_EQ(reference.size(), ddp.size());
  EXPECT_EQ(ddp[0], reference[0]) << "step 1 must be bitwise equal";
  for (std::size_t i = 1; i < ddp.size(); ++i)
    EXPECT_NEAR(ddp[i], reference[i], 1e-5 * std::abs(reference[i])) << "step " << i + 1;
  EXPECT_LT(ddp.back(), ddp.front()) << "the loss should fall";
}

TEST(DdpParity, MicroBatchSplitDoesNotChangeTheStep) {
  at::set_num_threads(1);
  MpiCommunicator self(MPI_COMM_SELF, "self", false);
  const auto a = test::train_losses(tiny_run("none", 2, 2), self, 4);
  const auto b = test::train_losses(tiny_run("none", 4, 1), self, 4);
  for (std::size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(a[i], b[i], 1e-6 * std::abs(b[i])) << "step " << i + 1;
}

}  // namespace
}  // namespace lft
