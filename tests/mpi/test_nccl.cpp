// The NCCL backend on CUDA tensors. It runs where the build has NCCL and every rank of the node
// has its own GPU (NCCL refuses two ranks on one device); elsewhere each test skips and says why.
#include <ATen/ATen.h>

#include "lft/build_config.h"
#include "mpi_test_util.h"

#if LFT_HAS_NCCL
#include <ATen/cuda/Sleep.h>
#include <cuda_runtime_api.h>

#include "lft/comm/nccl_communicator.h"
#endif

namespace lft {
namespace {

using test::world;

#if LFT_HAS_NCCL
using test::this_ranks_device;

TEST(Nccl, CollectivesOnCudaTensorsMatchLocalValues) {
  const DeviceChoice device = this_ranks_device();
  LFT_REQUIRE_GPU(device);
  NcclCommunicator nccl(world(), "nccl-world");
  const int n = world().size(), r = world().rank();
  const auto cuda = at::TensorOptions().device(at::kCUDA, device.index);
  for (auto dtype : {at::kFloat, at::kBFloat16, at::kLong}) {
    auto t = at::full({1001}, r + 1, cuda.dtype(dtype));
    nccl.all_reduce(t);
    EXPECT_TRUE(at::equal(t.cpu(), at::full({1001}, n * (n + 1) / 2, at::TensorOptions().dtype(dtype))));
  }
  auto in = at::full({5}, r + 1.0, cuda.dtype(at::kFloat));
  auto out = at::empty({5 * n}, in.options());
  nccl.all_gather(in, out);
  EXPECT_TRUE(at::equal(out.cpu(), at::arange(1, n + 1, at::kFloat).repeat_interleave(5)));
  auto full = at::ones({3 * n}, cuda.dtype(at::kFloat));
  auto shard = at::empty({3}, full.options());
  nccl.reduce_scatter(full, shard, ReduceOp::Avg);
  EXPECT_TRUE(at::equal(shard.cpu(), at::ones({3}, at::kFloat)));
  std::vector<int64_t> counts;
  for (int k = 0; k < n; ++k) counts.push_back(k + 1);
  auto mine = at::full({r + 1}, static_cast<double>(r), cuda.dtype(at::kDouble));
  auto gathered = at::empty({n * (n + 1) / 2}, mine.options());
  nccl.all_gather(mine, gathered, counts);
  EXPECT_EQ(gathered.sum().item<double>(), [&] { double s = 0; for (int k = 0; k < n; ++k) s += k * (k + 1.0); return s; }());
  nccl.barrier();
  EXPECT_EQ(nccl.stats()[CollKind::AllReduce].calls, 3u);  // three dtypes
  EXPECT_EQ(nccl.stats()[CollKind::Barrier].calls, 1u);  // counted as itself, not as an all-reduce
}

// Context parallelism's exchange: block j of rank r goes to rank j, as one grouped send and
// receive per peer (NCCL has no all-to-all call); at one rank, to itself.
TEST(Nccl, AllToAllOnCudaTensors) {
  const DeviceChoice device = this_ranks_device();
  LFT_REQUIRE_GPU(device);
  NcclCommunicator nccl(world(), "nccl-world");
  const int n = world().size(), r = world().rank();
  const auto cuda = at::TensorOptions().device(at::kCUDA, device.index).dtype(at::kFloat);
  const at::Tensor in = (at::arange(n * 3, cuda) / 3).floor() + 10 * r;  // block j: 10 r + j
  at::Tensor out = at::empty_like(in);
  nccl.all_to_all(in, out);
  const at::Tensor expected = at::arange(n, at::kFloat).repeat_interleave(3) * 10 + r;  // block j: 10 j + r
  EXPECT_TRUE(at::equal(out.cpu(), expected)) << out.cpu();
  EXPECT_EQ(nccl.stats()[CollKind::AllToAll].calls, 1u);
}

// The expert-parallel row exchange: uneven blocks (rank r sends r + j + 1 rows of 2 to rank j) in
// one NCCL group; at one rank, to itself.
TEST(Nccl, UnevenAllToAllOnCudaTensors) {
  const DeviceChoice device = this_ranks_device();
  LFT_REQUIRE_GPU(device);
  NcclCommunicator nccl(world(), "nccl-world");
  const int n = world().size(), r = world().rank();
  const auto cuda = at::TensorOptions().device(at::kCUDA, device.index).dtype(at::kFloat);
  std::vector<at::Tensor> mine, expected;
  std::vector<int64_t> send, recv;
  for (int j = 0; j < n; ++j) {
    mine.push_back(at::full({(r + j + 1) * 2}, 10 * r + j, cuda));
    send.push_back((r + j + 1) * 2);
    expected.push_back(at::full({(j + r + 1) * 2}, 10 * j + r, at::kFloat));
    recv.push_back((j + r + 1) * 2);
  }
  const at::Tensor in = at::cat(mine);
  at::Tensor out = at::empty({at::cat(expected).numel()}, cuda);
  nccl.all_to_all(in, out, send, recv);
  EXPECT_TRUE(at::equal(out.cpu(), at::cat(expected))) << out.cpu();
  EXPECT_EQ(nccl.stats()[CollKind::AllToAll].calls, 1u);
}

// The collectives run on the communicator's own stream: they must see what the compute stream
// wrote before the call, and the compute stream must see their result after wait(). A grouped
// send and receive around a ring (at one rank: to itself).
TEST(Nccl, OwnStreamIsOrderedWithTheComputeStream) {
  const DeviceChoice device = this_ranks_device();
  LFT_REQUIRE_GPU(device);
  NcclCommunicator nccl(world(), "nccl-world");
  const int n = world().size(), r = world().rank();
  const auto cuda = at::TensorOptions().device(at::kCUDA, device.index).dtype(at::kFloat);
  // A long kernel queue before the collective: the collective must wait for it.
  at::Tensor t = at::zeros({1 << 20}, cuda);
  for (int i = 0; i < 50; ++i) t.add_(1.0);
  WorkPtr work = nccl.all_reduce_async(t);
  work->wait();
  const at::Tensor after = t * 2;  // on the compute stream, after the all-reduce
  EXPECT_EQ(after.min().item<float>(), 100.0f * n);
  EXPECT_EQ(after.max().item<float>(), 100.0f * n);
  at::Tensor mine = at::full({1000}, static_cast<float>(r), cuda);
  at::Tensor theirs = at::empty_like(mine);
  Communicator::SendRecv both = nccl.send_recv_async(mine, (r + 1) % n, 0, theirs, (r + n - 1) % n, 0);
  both.recv->wait();
  both.send->wait();
  EXPECT_TRUE(at::equal(theirs.cpu(), at::full({1000}, static_cast<float>((r + n - 1) % n))));
  EXPECT_EQ(nccl.stats()[CollKind::Send].calls, 1u);
  EXPECT_EQ(nccl.stats()[CollKind::Recv].calls, 1u);
}

// The same with what the collective reads and writes kept apart: with the compute stream asleep
// for about half a second before it writes the input and clears the output, a collective that did
// not wait for it would gather the old input (or see its output cleared after it). At one rank
// too, where an in-place all-reduce changes nothing and cannot show the order (the check above).
TEST(Nccl, OutOfPlaceGatherWaitsForTheComputeStreamsWrites) {
  const DeviceChoice device = this_ranks_device();
  LFT_REQUIRE_GPU(device);
  NcclCommunicator nccl(world(), "nccl-world");
  const int n = world().size(), r = world().rank();
  const std::int64_t each = 1 << 20;
  const auto cuda = at::TensorOptions().device(at::kCUDA, device.index).dtype(at::kFloat);
  at::Tensor in = at::full({each}, -1.0f, cuda);
  at::Tensor out = at::empty({n * each}, cuda);
  at::cuda::sleep(1'000'000'000);
  in.fill_(static_cast<float>(r + 1));
  out.fill_(-2.0f);
  WorkPtr work = nccl.all_gather_async(in, out);
  work->wait();
  const at::Tensor expected =
      at::arange(1, n + 1, cuda).repeat_interleave(each);  // rank k's block holds k + 1
  EXPECT_TRUE(at::equal(out, expected)) << "min " << out.min().item<float>() << ", max " << out.max().item<float>();
}

// A Work stays usable after the device timings have read its events and let them go: post A and
// B, wait B and settle every timing, post C (whose new events may take A's old handles), then test
// and wait A. Before the Work shared its end event, settling destroyed it: "invalid resource
// handle", or a wait on C's event instead of A's. At one rank too (the device check's first part).
TEST(Nccl, WorkOutlivesItsSettledTimings) {
  const DeviceChoice device = this_ranks_device();
  LFT_REQUIRE_GPU(device);
  NcclCommunicator nccl(world(), "nccl-world");
  const int n = world().size();
  const auto cuda = at::TensorOptions().device(at::kCUDA, device.index).dtype(at::kFloat);
  at::Tensor a = at::full({4096}, 1.0f, cuda), b = at::full({4096}, 2.0f, cuda), c = at::full({4096}, 3.0f, cuda);
  WorkPtr first = nccl.all_reduce_async(a);
  WorkPtr second = nccl.all_reduce_async(b);
  second->wait();
  nccl.settle_stats();  // every span so far complete, read and dropped by the timings
  WorkPtr third = nccl.all_reduce_async(c);
  EXPECT_NO_THROW(while (!first->test()) {});
  EXPECT_NO_THROW(first->wait());
  third->wait();
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(a.min().item<float>(), 1.0f * n);
  EXPECT_EQ(b.max().item<float>(), 2.0f * n);
  EXPECT_EQ(c.min().item<float>(), 3.0f * n);
}

TEST(Nccl, RejectsCpuTensors) {
  const DeviceChoice device = this_ranks_device();
  LFT_REQUIRE_GPU(device);
  NcclCommunicator nccl(world(), "nccl-world");
  auto t = at::ones({4});
  EXPECT_THROW(nccl.all_reduce(t), std::invalid_argument);
}
#else
TEST(Nccl, NotBuilt) { GTEST_SKIP() << "this build has no NCCL backend (LFT_ENABLE_CUDA found no CUDA/NCCL)"; }
#endif

}  // namespace
}  // namespace lft
