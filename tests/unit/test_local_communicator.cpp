// The communicator of a group of one rank (a mesh dimension of size 1 on a GPU): every collective
// gives what the same collective gives at world 1 on any backend, checked and counted the same.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "lft/comm/local_communicator.h"

namespace lft {
namespace {

TEST(LocalCommunicator, CollectivesOfOneRankAreTheirInputs) {
  LocalCommunicator c("tp", at::kCPU);
  EXPECT_EQ(c.size(), 1);
  EXPECT_EQ(c.rank(), 0);
  at::Tensor t = at::arange(6, at::kFloat);
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) c.all_reduce(t, op);
  EXPECT_TRUE(at::equal(t, at::arange(6, at::kFloat)));
  at::Tensor shard = at::empty({6});
  c.reduce_scatter(t, shard);
  EXPECT_TRUE(at::equal(shard, t));
  at::Tensor gathered = at::zeros({6});
  c.all_gather(t, gathered, {6});
  EXPECT_TRUE(at::equal(gathered, t));
  c.broadcast(t, 0);
  c.barrier();
  EXPECT_EQ(c.stats()[CollKind::AllReduce].calls, 3u);
  EXPECT_EQ(c.stats()[CollKind::AllReduce].bytes, 3u * 6 * 4);
  EXPECT_EQ(c.stats()[CollKind::ReduceScatter].calls, 1u);
  EXPECT_EQ(c.stats()[CollKind::AllGather].calls, 1u);
  EXPECT_EQ(c.stats()[CollKind::Barrier].calls, 1u);
}

TEST(LocalCommunicator, SendsToItselfArriveInOrderByTag) {
  LocalCommunicator c("pp", at::kCPU);
  at::Tensor a = at::full({3}, 1.0), b = at::full({3}, 2.0), got = at::empty({3});
  c.send(a, 0, 7);
  c.send(b, 0, 7);
  a.fill_(9.0);  // sent as it was when posted
  c.recv(got, 0, 7);
  EXPECT_TRUE(at::equal(got, at::full({3}, 1.0)));
  Communicator::SendRecv both = c.send_recv_async(at::full({3}, 3.0), 0, 1, got, 0, 1);
  both.recv->wait();
  EXPECT_TRUE(at::equal(got, at::full({3}, 3.0)));
  c.recv(got, 0, 7);
  EXPECT_TRUE(at::equal(got, at::full({3}, 2.0)));
  EXPECT_THROW(c.recv(got, 0, 7), std::logic_error);      // nothing left with that tag
  EXPECT_THROW(c.send(a, 1, 0), std::invalid_argument);   // there is no rank 1
  EXPECT_THROW(c.broadcast(a, 1), std::invalid_argument);
}

TEST(LocalCommunicator, ChecksTensorsAsEveryBackendDoes) {
  LocalCommunicator c("dp", at::kCPU);
  at::Tensor t = at::ones({4, 4}).t();  // not contiguous
  EXPECT_THROW(c.all_reduce(t), std::invalid_argument);
  EXPECT_THROW(c.all_gather(at::ones({2}), at::empty({3})), std::invalid_argument);
  EXPECT_THROW(c.all_reduce(at::ones({2}, at::TensorOptions().device(at::kMeta))), std::invalid_argument);
}

}  // namespace
}  // namespace lft
