// Built only when LFT_HAS_NCCL (CMake drops nccl_*.cpp otherwise).
#include "lft/comm/nccl_communicator.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>

#include <stdexcept>

#include "lft/comm/watchdog.h"
#include "lft/runtime/check.h"
#include "lft/runtime/cuda_check.h"

namespace lft {
namespace {

ncclDataType_t nccl_type(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kHalf: return ncclFloat16;
    case at::kBFloat16: return ncclBfloat16;
    case at::kInt: return ncclInt32;
    case at::kLong: return ncclInt64;
    case at::kByte:
    case at::kBool: return ncclUint8;
    default:
      if (t.element_size() == 1) return ncclUint8;  // float8 moves as bytes
      throw std::invalid_argument("NCCL backend: dtype " +
                                  std::string(c10::toString(t.scalar_type())) + " not supported");
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Max: return ncclMax;
  }
  return ncclSum;
}

cudaStream_t current_stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

at::Device current_device() { return at::Device(at::kCUDA, c10::cuda::current_device()); }

// An operation on the communicator's stream: an event recorded after it marks its completion.
// wait() makes the compute stream wait for that event; the host goes on (the step's one read of
// its loss and norms is where the host waits, under the watchdog: device_read.h).
class NcclWork final : public Work {
 public:
  NcclWork(std::string what, CollStats* stats, cudaStream_t stream) : Work(std::move(what), stats) {
    LFT_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
    LFT_CUDA_CHECK(cudaEventRecord(event_, stream));
  }
  ~NcclWork() override {
    finish_in_destructor();
    cudaEventDestroy(event_);
  }

 protected:
  void block() override { LFT_CUDA_CHECK(cudaStreamWaitEvent(current_stream(), event_, 0)); }
  bool poll() override {
    const cudaError_t rc = cudaEventQuery(event_);
    if (rc == cudaErrorNotReady) return false;
    LFT_CUDA_CHECK(rc);
    return true;
  }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace

std::string nccl_version() {
  int v = 0;
  LFT_NCCL_CHECK(ncclGetVersion(&v));
  return std::to_string(v / 10000) + "." + std::to_string((v / 100) % 100) + "." +
         std::to_string(v % 100);
}

NcclCommunicator::NcclCommunicator(const MpiCommunicator& bootstrap, std::string name)
    : Communicator(std::move(name), bootstrap.rank(), bootstrap.size(), current_device()),
      stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/true)) {
  ncclUniqueId id;
  if (rank() == 0) LFT_NCCL_CHECK(ncclGetUniqueId(&id));
  Watchdog::Scope scope("creating NCCL communicator '" + this->name() + "'",
                        Watchdog::setup_timeout(), "setup_timeout");
  LFT_MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, bootstrap.handle()));
  LFT_NCCL_CHECK(ncclCommInitRank(&comm_, size(), id, rank()));
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ != nullptr) ncclCommDestroy(comm_);
}

cudaStream_t NcclCommunicator::enter(std::initializer_list<const at::Tensor*> tensors) {
  // The collective reads what the compute stream wrote before the call.
  cudaEvent_t ready = nullptr;
  LFT_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  LFT_CUDA_CHECK(cudaEventRecord(ready, current_stream()));
  LFT_CUDA_CHECK(cudaStreamWaitEvent(stream_.stream(), ready, 0));
  LFT_CUDA_CHECK(cudaEventDestroy(ready));
  // A buffer the caller frees while the collective may still use it is not reused before then.
  for (const at::Tensor* t : tensors)
    c10::cuda::CUDACachingAllocator::recordStream(t->storage().data_ptr(), stream_);
  return stream_.stream();
}

WorkPtr NcclCommunicator::leave(CallInfo info) {
  return std::make_unique<NcclWork>(std::move(info.what), info.stats, stream_.stream());
}

WorkPtr NcclCommunicator::do_all_reduce(const at::Tensor& t, ReduceOp op, CallInfo info) {
  cudaStream_t stream = enter({&t});
  LFT_NCCL_CHECK(ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t), nccl_op(op),
                               comm_, stream));
  return leave(std::move(info));
}

WorkPtr NcclCommunicator::do_reduce_scatter(const at::Tensor& in, const at::Tensor& out,
                                            ReduceOp op, const std::vector<int64_t>& counts,
                                            CallInfo info) {
  cudaStream_t stream = enter({&in, &out});
  if (counts.empty()) {
    LFT_NCCL_CHECK(ncclReduceScatter(in.data_ptr(), out.data_ptr(), out.numel(), nccl_type(in),
                                     nccl_op(op), comm_, stream));
  } else {
    // Unequal shards: one reduce per destination rank, in one group.
    const auto* base = static_cast<const char*>(in.data_ptr());
    int64_t offset = 0;
    LFT_NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < size(); ++r) {
      LFT_NCCL_CHECK(ncclReduce(base + offset * in.element_size(), out.data_ptr(), counts[r],
                                nccl_type(in), nccl_op(op), r, comm_, stream));
      offset += counts[r];
    }
    LFT_NCCL_CHECK(ncclGroupEnd());
  }
  return leave(std::move(info));
}

WorkPtr NcclCommunicator::do_all_gather(const at::Tensor& in, const at::Tensor& out,
                                        const std::vector<int64_t>& counts, CallInfo info) {
  cudaStream_t stream = enter({&in, &out});
  if (counts.empty()) {
    LFT_NCCL_CHECK(ncclAllGather(in.data_ptr(), out.data_ptr(), in.numel(), nccl_type(in), comm_,
                                 stream));
  } else {
    // Unequal shards: every rank broadcasts its shard into place, in one group.
    auto* base = static_cast<char*>(out.data_ptr());
    int64_t offset = 0;
    LFT_NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < size(); ++r) {
      LFT_NCCL_CHECK(ncclBroadcast(in.data_ptr(), base + offset * out.element_size(), counts[r],
                                   nccl_type(in), r, comm_, stream));
      offset += counts[r];
    }
    LFT_NCCL_CHECK(ncclGroupEnd());
  }
  return leave(std::move(info));
}

WorkPtr NcclCommunicator::do_broadcast(const at::Tensor& t, int root, CallInfo info) {
  cudaStream_t stream = enter({&t});
  LFT_NCCL_CHECK(ncclBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t), root, comm_,
                               stream));
  return leave(std::move(info));
}

WorkPtr NcclCommunicator::do_send(const at::Tensor& t, int dst, int /*tag*/, CallInfo info) {
  cudaStream_t stream = enter({&t});
  LFT_NCCL_CHECK(ncclSend(t.data_ptr(), t.numel(), nccl_type(t), dst, comm_, stream));
  return leave(std::move(info));
}

WorkPtr NcclCommunicator::do_recv(const at::Tensor& t, int src, int /*tag*/, CallInfo info) {
  cudaStream_t stream = enter({&t});
  LFT_NCCL_CHECK(ncclRecv(t.data_ptr(), t.numel(), nccl_type(t), src, comm_, stream));
  return leave(std::move(info));
}

Communicator::SendRecv NcclCommunicator::do_send_recv(const at::Tensor& send, int dst, int /*send_tag*/,
                                                      const at::Tensor& recv, int src, int /*recv_tag*/,
                                                      CallInfo send_info, CallInfo recv_info) {
  cudaStream_t stream = enter({&send, &recv});
  LFT_NCCL_CHECK(ncclGroupStart());
  LFT_NCCL_CHECK(ncclSend(send.data_ptr(), send.numel(), nccl_type(send), dst, comm_, stream));
  LFT_NCCL_CHECK(ncclRecv(recv.data_ptr(), recv.numel(), nccl_type(recv), src, comm_, stream));
  LFT_NCCL_CHECK(ncclGroupEnd());
  SendRecv out;
  out.send = leave(std::move(send_info));
  out.recv = leave(std::move(recv_info));
  return out;
}

WorkPtr NcclCommunicator::do_barrier(CallInfo info) {
  auto one = at::ones({1}, at::TensorOptions().dtype(at::kInt).device(device()));
  cudaStream_t stream = enter({&one});
  LFT_NCCL_CHECK(ncclAllReduce(one.data_ptr(), one.data_ptr(), 1, ncclInt32, ncclSum, comm_,
                               stream));
  return leave(std::move(info));
}

}  // namespace lft
