// DeviceMesh over every 5-factor shape of the world size: coordinates, group sizes and ranks, and
// an all-reduce on every dim and on dp whose sum each rank predicts from the mapping.
#include <ATen/ATen.h>

#include "lft/mesh/device_mesh.h"
#include "mpi_test_util.h"

namespace lft {
namespace {

using test::world;

std::vector<MeshShape> shapes_of(int n) {
  std::vector<MeshShape> out;
  for (int pp = 1; pp <= n; ++pp)
    for (int r = 1; r <= n; ++r)
      for (int s = 1; s <= n; ++s)
        for (int c = 1; c <= n; ++c)
          for (int t = 1; t <= n; ++t)
            if (pp * r * s * c * t == n) out.push_back(MeshShape{{pp, r, s, c, t}});
  return out;
}

// Sum of the world ranks whose coordinates equal `mine` except on the dims in `free_dims`.
int64_t group_rank_sum(const MeshShape& shape, const MeshCoord& mine, std::vector<int> free_dims) {
  int64_t sum = 0;
  for (int r = 0; r < shape.world_size(); ++r) {
    const MeshCoord c = mesh_coord(shape, r);
    bool same = true;
    for (int d = 0; d < kMeshDims; ++d)
      if (std::find(free_dims.begin(), free_dims.end(), d) == free_dims.end() && c[d] != mine[d])
        same = false;
    if (same) sum += r;
  }
  return sum;
}

TEST(DeviceMesh, EveryShapeOfTheWorld) {
  for (const MeshShape& shape : shapes_of(world().size())) {
    SCOPED_TRACE(shape.str());
    DeviceMesh mesh(world(), shape);
    EXPECT_EQ(mesh.coord(), mesh_coord(shape, world().rank()));
    for (int d = 0; d < kMeshDims; ++d) {
      MpiCommunicator& comm = mesh.comm(static_cast<MeshDim>(d));
      EXPECT_EQ(comm.size(), shape.sizes[d]);
      EXPECT_EQ(comm.rank(), mesh.coord()[d]);
      auto t = at::full({1}, static_cast<int64_t>(world().rank()), at::kLong);
      comm.all_reduce(t);
      EXPECT_EQ(t.item<int64_t>(), group_rank_sum(shape, mesh.coord(), {d})) << "dim " << d;
    }
    EXPECT_EQ(mesh.dp().size(), shape.dp_size());
    EXPECT_EQ(mesh.dp().rank(), mesh.dp_rank());
    auto t = at::full({1}, static_cast<int64_t>(world().rank()), at::kLong);
    mesh.dp().all_reduce(t);
    EXPECT_EQ(t.item<int64_t>(), group_rank_sum(shape, mesh.coord(), {1, 2}));
    // The parameter groups of context parallelism: dp x cp and dp_shard x cp.
    const int cp = shape[MeshDim::CP];
    Communicator& dp_cp = mesh.device_dp_cp();
    EXPECT_EQ(dp_cp.size(), shape.dp_size() * cp);
    EXPECT_EQ(dp_cp.rank(), mesh.dp_rank() * cp + mesh.coord(MeshDim::CP));
    t.fill_(world().rank());
    dp_cp.all_reduce(t);
    EXPECT_EQ(t.item<int64_t>(), group_rank_sum(shape, mesh.coord(), {1, 2, 3}));
    Communicator& shard_cp = mesh.device_shard_cp();
    EXPECT_EQ(shard_cp.size(), shape[MeshDim::DPShard] * cp);
    EXPECT_EQ(shard_cp.rank(), mesh.coord(MeshDim::DPShard) * cp + mesh.coord(MeshDim::CP));
    t.fill_(world().rank());
    shard_cp.all_reduce(t);
    EXPECT_EQ(t.item<int64_t>(), group_rank_sum(shape, mesh.coord(), {2, 3}));
  }
}

TEST(DeviceMesh, TensorParallelRanksAreConsecutive) {
  LFT_REQUIRE_RANKS(4);
  if (world().size() % 2 != 0) GTEST_SKIP() << "needs an even world size";
  DeviceMesh mesh(world(), MeshShape{{1, world().size() / 2, 1, 1, 2}});
  auto t = at::full({1}, static_cast<int64_t>(world().rank()), at::kLong);
  auto out = at::empty({2}, at::kLong);
  mesh.comm(MeshDim::TP).all_gather(t, out);
  const int64_t base = world().rank() - world().rank() % 2;
  EXPECT_EQ(out[0].item<int64_t>(), base);
  EXPECT_EQ(out[1].item<int64_t>(), base + 1);
}

TEST(DeviceMesh, WrongWorldSizeIsRejected) {
  EXPECT_THROW(DeviceMesh(world(), MeshShape{{1, world().size() + 1, 1, 1, 1}}),
               std::invalid_argument);
}

}  // namespace
}  // namespace lft
