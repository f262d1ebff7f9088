// The placement report: ranks host by host with their mesh coordinates, and which groups of the
// innermost dims cross hosts (block vs cyclic placement of 2 hosts x 2 or 4 ranks).
#include <gtest/gtest.h>

#include "lft/app/placement.h"
#include "lft/comm/liveness.h"

namespace lft::app {
namespace {

std::vector<std::string> block(int hosts, int per_host) {
  std::vector<std::string> out;
  for (int h = 0; h < hosts; ++h)
    for (int i = 0; i < per_host; ++i) out.push_back("node" + std::to_string(h + 1));
  return out;
}

std::vector<std::string> cyclic(int hosts, int per_host) {
  std::vector<std::string> out;
  for (int i = 0; i < per_host; ++i)
    for (int h = 0; h < hosts; ++h) out.push_back("node" + std::to_string(h + 1));
  return out;
}

TEST(Placement, CompressesRanges) {
  EXPECT_EQ(compress_ranges({3, 0, 1, 2}), "0-3");
  EXPECT_EQ(compress_ranges({0, 2, 5, 6}), "0,2,5-6");
  EXPECT_EQ(compress_ranges({4}), "4");
  EXPECT_EQ(compress_ranges({}), "");
}

TEST(Placement, HsdpBlockKeepsShardGroupsInsideHosts) {
  const MeshShape hsdp{{1, 2, 2, 1, 1}};  // dp_replicate 2 x dp_shard 2
  const std::string report = placement_report(hsdp, block(2, 2));
  EXPECT_NE(report.find("placement  2 host(s), host by host:"), std::string::npos) << report;
  EXPECT_NE(report.find("  node1  ranks 0-1 (pp 0, dp_replicate 0, dp_shard 0-1, cp 0, tp 0)"), std::string::npos) << report;
  EXPECT_NE(report.find("  node2  ranks 2-3 (pp 0, dp_replicate 1, dp_shard 0-1, cp 0, tp 0)"), std::string::npos) << report;
  EXPECT_NE(report.find("dp_shard groups (2 ranks each): each inside one host"), std::string::npos) << report;
  EXPECT_NE(report.find("dp_replicate groups (2 ranks each): 2 of 2 span hosts"), std::string::npos) << report;
  EXPECT_TRUE(placement_warnings(hsdp, block(2, 2)).empty());
}

TEST(Placement, CyclicPlacementIsWarnedAbout) {
  const MeshShape hsdp{{1, 2, 2, 1, 1}};
  const auto warnings = placement_warnings(hsdp, cyclic(2, 2));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("2 of 2 dp_shard groups span hosts (e.g. ranks 0-1 on node1, node2)"), std::string::npos)
      << warnings[0];
}

TEST(Placement, TensorParallelLargerThanAHostSpansHosts) {
  const MeshShape tp4{{1, 2, 1, 1, 4}};  // tp 4 on hosts of 2 ranks
  const auto warnings = placement_warnings(tp4, block(4, 2));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("2 of 2 tp groups span hosts"), std::string::npos) << warnings[0];
  // Megatron's tp 2 x pp 2 on 2 hosts of 2: tp inside, pp across.
  const MeshShape tp2pp2{{2, 1, 1, 1, 2}};
  const std::string report = placement_report(tp2pp2, block(2, 2));
  EXPECT_NE(report.find("tp groups (2 ranks each): each inside one host"), std::string::npos) << report;
  EXPECT_NE(report.find("pp groups (2 ranks each): 2 of 2 span hosts"), std::string::npos) << report;
  EXPECT_TRUE(placement_warnings(tp2pp2, block(2, 2)).empty());
}

TEST(Placement, LostRanksAreGroupedByHost) {
  EXPECT_EQ(ranks_by_host({2, 3, 5}, block(3, 2)), "ranks 2, 3 on node2; rank 5 on node3");
  EXPECT_EQ(ranks_by_host({}, block(1, 2)), "");
}

}  // namespace
}  // namespace lft::app
