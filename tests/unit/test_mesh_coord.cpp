#include <gtest/gtest.h>

#include "lft/comm/stats.h"
#include "lft/mesh/device_mesh.h"

namespace lft {
namespace {

TEST(MeshCoord, TpIsInnermostAndPpOutermost) {
  const MeshShape shape{{2, 2, 1, 1, 2}};  // 8 ranks
  EXPECT_EQ(mesh_coord(shape, 0), (MeshCoord{0, 0, 0, 0, 0}));
  EXPECT_EQ(mesh_coord(shape, 1), (MeshCoord{0, 0, 0, 0, 1}));
  EXPECT_EQ(mesh_coord(shape, 2), (MeshCoord{0, 1, 0, 0, 0}));
  EXPECT_EQ(mesh_coord(shape, 4), (MeshCoord{1, 0, 0, 0, 0}));
  EXPECT_EQ(mesh_coord(shape, 7), (MeshCoord{1, 1, 0, 0, 1}));
  for (int r = 0; r < shape.world_size(); ++r) EXPECT_EQ(mesh_rank(shape, mesh_coord(shape, r)), r);
  EXPECT_EQ(shape.str(), "pp=2 x dp_replicate=2 x dp_shard=1 x cp=1 x tp=2");
  EXPECT_EQ(shape.dp_size(), 2);
}

TEST(MeshCoord, CpSitsBetweenDpShardAndTp) {
  const MeshShape shape{{1, 1, 2, 2, 2}};  // 8 ranks: a cp group of consecutive tp groups
  EXPECT_EQ(mesh_coord(shape, 2), (MeshCoord{0, 0, 0, 1, 0}));
  EXPECT_EQ(mesh_coord(shape, 5), (MeshCoord{0, 0, 1, 0, 1}));
  for (int r = 0; r < shape.world_size(); ++r) EXPECT_EQ(mesh_rank(shape, mesh_coord(shape, r)), r);
  EXPECT_EQ(shape.dp_size(), 2);  // cp ranks train on the same samples
}

TEST(BusBytes, RingConventions) {
  EXPECT_DOUBLE_EQ(bus_bytes(CollKind::AllReduce, 1000, 4), 1500);
  EXPECT_DOUBLE_EQ(bus_bytes(CollKind::AllGather, 1000, 4), 750);
  EXPECT_DOUBLE_EQ(bus_bytes(CollKind::ReduceScatter, 1000, 4), 750);
  EXPECT_DOUBLE_EQ(bus_bytes(CollKind::Broadcast, 1000, 4), 1000);
  EXPECT_DOUBLE_EQ(bus_bytes(CollKind::AllToAll, 1000, 4), 750);
  EXPECT_DOUBLE_EQ(bus_bytes(CollKind::AllReduce, 1000, 1), 0);
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
}

}  // namespace
}  // namespace lft
