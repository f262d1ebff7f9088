// Host and device communicators: every backend rejects a tensor on another device than its own,
// and the MPI backend moves GPU tensors through host memory when the ranks share one GPU (the
// ranks_per_gpu run mode). The staged tests need a GPU and skip elsewhere, saying why.
#include <ATen/ATen.h>

#include <string>

#include "lft/build_config.h"
#include "lft/comm/local_communicator.h"
#include "lft/mesh/device_mesh.h"
#include "lft/runtime/side_stream.h"
#include "mpi_test_util.h"

#if LFT_HAS_CUDA
#include <ATen/cuda/Sleep.h>
#endif

namespace lft {
namespace {

using test::world;

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(DeviceComm, MpiRejectsTensorsOnAnotherDevice) {
  auto meta = at::empty({4}, at::TensorOptions().device(at::kMeta));
  const std::string host_error = error_of([&] { world().all_reduce(meta); });
  EXPECT_NE(host_error.find("takes tensors on cpu, got one on meta"), std::string::npos) << host_error;
  EXPECT_NE(host_error.find("communicator 'world'"), std::string::npos) << host_error;

  // A device communicator of a shared-GPU run refuses host tensors before touching the GPU, so
  // this runs on CPU-only machines too.
  const auto on_gpu = world().on_device(at::Device(at::kCUDA, 0));
  EXPECT_EQ(on_gpu->device(), at::Device(at::kCUDA, 0));
  auto cpu = at::ones({4});
  const std::string device_error = error_of([&] { on_gpu->all_reduce(cpu); });
  EXPECT_NE(device_error.find("takes tensors on cuda:0, got one on cpu"), std::string::npos) << device_error;
  EXPECT_NE(device_error.find("host communicators"), std::string::npos) << device_error;
  auto out = at::empty({4 * world().size()});
  EXPECT_FALSE(error_of([&] { on_gpu->all_gather(cpu, out); }).empty());
  EXPECT_FALSE(error_of([&] { on_gpu->broadcast(cpu, 0); }).empty());
  EXPECT_EQ(on_gpu->stats()[CollKind::AllReduce].calls, 0u);  // nothing was posted
}

TEST(DeviceComm, CpuMeshUsesItsHostCommunicatorsForDeviceTensors) {
  DeviceMesh mesh(world(), MeshShape{{1, world().size(), 1, 1, 1}});
  EXPECT_TRUE(mesh.device().is_cpu());
  EXPECT_FALSE(mesh.on_cuda());
  EXPECT_EQ(&mesh.device_dp(), static_cast<Communicator*>(&mesh.dp()));
  EXPECT_EQ(&mesh.device_comm(MeshDim::TP), static_cast<Communicator*>(&mesh.comm(MeshDim::TP)));
  EXPECT_THROW(DeviceMesh(world(), MeshShape{{1, world().size(), 1, 1, 1}}, at::Device(at::kCUDA, 0), DeviceComms::Host),
               std::invalid_argument);
  EXPECT_THROW(DeviceMesh(world(), MeshShape{{1, world().size(), 1, 1, 1}}, at::kCPU, DeviceComms::MpiStaged),
               std::invalid_argument);
}

TEST(DeviceComm, SendRecvPairAroundARing) {
  LFT_REQUIRE_RANKS(2);
  const int n = world().size(), r = world().rank();
  auto mine = at::full({100}, static_cast<double>(r));
  auto theirs = at::empty_like(mine);
  const auto sends = world().stats()[CollKind::Send].calls;
  Communicator::SendRecv both = world().send_recv_async(mine, (r + 1) % n, 7, theirs, (r + n - 1) % n, 7);
  both.recv->wait();
  both.send->wait();
  EXPECT_TRUE(at::equal(theirs, at::full({100}, static_cast<double>((r + n - 1) % n))));
  EXPECT_EQ(world().stats()[CollKind::Send].calls, sends + 1);
  auto meta = at::empty({4}, at::TensorOptions().device(at::kMeta));
  EXPECT_THROW(world().send_recv_async(mine, 0, 0, meta, 0, 0), std::invalid_argument);
}

// Every rank of the node on GPU 0, as with ranks_per_gpu = local size.
DeviceChoice shared_gpu() { return test::this_ranks_device(/*share_one_gpu=*/true); }

TEST(DeviceComm, StagedMpiOnCudaTensorsMatchesLocalValues) {
  const DeviceChoice device = shared_gpu();
  LFT_REQUIRE_GPU(device);
  const at::Device gpu(at::kCUDA, static_cast<c10::DeviceIndex>(device.index));
  const auto comm = world().on_device(gpu);
  const int n = comm->size(), r = comm->rank();
  const auto cuda = at::TensorOptions().device(gpu);
  for (auto dtype : {at::kFloat, at::kBFloat16, at::kDouble, at::kLong}) {
    auto t = at::full({1001}, r + 1, cuda.dtype(dtype));
    comm->all_reduce(t);
    EXPECT_TRUE(t.is_cuda());
    EXPECT_TRUE(at::equal(t.cpu(), at::full({1001}, n * (n + 1) / 2, at::TensorOptions().dtype(dtype))));
  }
  auto in = at::full({5}, r + 1.0, cuda.dtype(at::kFloat));
  auto out = at::empty({5 * n}, in.options());
  comm->all_gather(in, out);
  EXPECT_TRUE(at::equal(out.cpu(), at::arange(1, n + 1, at::kFloat).repeat_interleave(5)));
  auto full = at::ones({3 * n}, cuda.dtype(at::kBFloat16));
  auto shard = at::empty({3}, full.options());
  comm->reduce_scatter(full, shard, ReduceOp::Avg);
  EXPECT_TRUE(at::equal(shard.cpu(), at::ones({3}, at::kBFloat16)));
  auto b = at::full({7}, static_cast<double>(r), cuda.dtype(at::kDouble));
  comm->broadcast(b, n - 1);
  EXPECT_TRUE(at::equal(b.cpu(), at::full({7}, n - 1.0, at::kDouble)));
  if (n > 1) {  // a ring: each rank sends its rank to the next
    auto mine = at::full({3}, static_cast<float>(r), cuda.dtype(at::kFloat));
    auto theirs = at::empty_like(mine);
    WorkPtr send = comm->send_async(mine, (r + 1) % n, 3);
    comm->recv(theirs, (r + n - 1) % n, 3);
    send->wait();
    EXPECT_TRUE(at::equal(theirs.cpu(), at::full({3}, static_cast<float>((r + n - 1) % n))));
  }
}

TEST(DeviceComm, StagedMeshOnCudaHasGpuDeviceCommunicators) {
  const DeviceChoice device = shared_gpu();
  LFT_REQUIRE_GPU(device);
  const at::Device gpu(at::kCUDA, static_cast<c10::DeviceIndex>(device.index));
  DeviceMesh mesh(world(), MeshShape{{1, world().size(), 1, 1, 1}}, gpu, DeviceComms::MpiStaged);
  EXPECT_EQ(mesh.device_dp().device(), gpu);
  EXPECT_TRUE(mesh.dp().device().is_cpu());
  auto host = at::ones({2});
  EXPECT_THROW(mesh.device_dp().all_reduce(host), std::invalid_argument);
  auto on_gpu = at::ones({2}, at::TensorOptions().device(gpu));
  EXPECT_THROW(mesh.dp().all_reduce(on_gpu), std::invalid_argument);
  mesh.device_dp().all_reduce(on_gpu);
  EXPECT_EQ(on_gpu.sum().item<float>(), 2.0f * world().size());
  // A dimension of size 1 computes locally: nothing staged through host memory, no NCCL for it.
  EXPECT_STREQ(mesh.device_comm(MeshDim::TP).backend(), "local");
  EXPECT_STREQ(mesh.device_comm(MeshDim::PP).backend(), "local");
  EXPECT_STREQ(mesh.device_comm(MeshDim::DPShard).backend(), world().size() == 1 ? "local" : "mpi");
}

// Offload at world 1: a shard's copy and its gather are queued on the side stream and the compute
// stream reads the result after wait(). With a long sleep queued on the side stream first, the
// read must see the gathered values, not what the buffer held before (the local Work was complete
// on the host at once and its wait did nothing: the compute stream read the sentinel). Every rank
// on its own local communicator on the shared GPU.
TEST(DeviceComm, LocalGatherOnTheSideStreamIsWaitedForByTheComputeStream) {
  const DeviceChoice device = shared_gpu();
  LFT_REQUIRE_GPU(device);
#if LFT_HAS_CUDA
  const at::Device gpu(at::kCUDA, static_cast<c10::DeviceIndex>(device.index));
  LocalCommunicator local("local", gpu);
  const at::Tensor in = at::full({1 << 20}, 7.0f, at::TensorOptions().device(gpu));
  const at::Tensor out = at::full({1 << 20}, -1.0f, in.options());
  WorkPtr work;
  {
    const SideStreamScope side(gpu);
    at::cuda::sleep(1'000'000'000);  // about half a second of the side stream before the copy
    work = local.all_gather_async(in, out);
  }
  work->wait();
  EXPECT_EQ(out.min().item<float>(), 7.0f);
#endif
}

}  // namespace
}  // namespace lft
