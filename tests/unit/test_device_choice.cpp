// Which GPU a rank drives, decided without a GPU: the index among the GPUs it sees, and the
// refusal of two ranks on one GPU that ranks_per_gpu does not share.
#include <gtest/gtest.h>

#include "lft/runtime/device.h"

namespace lft {
namespace {

TEST(DeviceChoice, EveryGpuVisibleTakesTheLocalRanksOwn) {
  EXPECT_EQ(gpu_index(0, 4, 4, 1), 0);
  EXPECT_EQ(gpu_index(3, 4, 4, 1), 3);
  EXPECT_EQ(gpu_index(3, 4, 8, 1), 3);
  EXPECT_EQ(gpu_index(3, 4, 2, 2), 1);  // two ranks a GPU
  EXPECT_EQ(gpu_index(0, 1, 0, 1), std::nullopt);
}

// Slurm's --gpus-per-task=1 (or a per-rank CUDA_VISIBLE_DEVICES) leaves each of a node's 4 ranks
// one visible GPU: every rank takes it (was: the CPU, silently, "4 ranks but 1 GPU").
TEST(DeviceChoice, ALauncherBoundRankTakesTheGpuItSees) {
  for (int local_rank = 0; local_rank < 4; ++local_rank) EXPECT_EQ(gpu_index(local_rank, 4, 1, 1), 0);
  EXPECT_EQ(gpu_index(3, 4, 2, 1), 1);  // two visible of the node's four
}

TEST(DeviceChoice, TwoRanksOnOneGpuAreRefusedUnlessShared) {
  const std::string a = "GPU-aaaaaaaa-0000-0000-0000-000000000000", b = "GPU-bbbbbbbb-0000-0000-0000-000000000000";
  EXPECT_EQ(shared_gpu_conflict({a, b}, 1), "");
  EXPECT_EQ(shared_gpu_conflict({"", ""}, 1), "");  // CPU ranks
  const std::string conflict = shared_gpu_conflict({a, b, a}, 1);
  EXPECT_NE(conflict.find("ranks 0, 2 would all compute on GPU " + a), std::string::npos) << conflict;
  EXPECT_NE(conflict.find("ranks_per_gpu = 2"), std::string::npos) << conflict;
  EXPECT_NE(conflict.find("--gpus-per-task=1"), std::string::npos) << conflict;
  EXPECT_EQ(shared_gpu_conflict({a, a, b, b}, 2), "");
  EXPECT_NE(shared_gpu_conflict({a, a, a, b}, 2), "");
}

}  // namespace
}  // namespace lft
