// The NCCL backend, for CUDA tensors (built when LFT_HAS_NCCL). Rank 0 of the group makes the
// unique id and broadcasts it over the group's MPI communicator. Operations run on the
// communicator's own stream, after what the compute stream queued before the call; wait() makes
// the compute stream wait for them (the host does not block), and the buffers they use are
// recorded on that stream so the allocator does not reuse them while NCCL may still touch them.
// Every host call into NCCL runs under the watchdog, which aborts every NCCL communicator when a
// deadline passes; seconds and waited_seconds are measured on the device (settle_stats).
#pragma once

#include <c10/cuda/CUDAStream.h>
#include <nccl.h>

#include <initializer_list>
#include <memory>

#include "lft/comm/communicator.h"
#include "lft/comm/mpi_communicator.h"

namespace lft {

class NcclCommunicator : public Communicator {
 public:
  // Collective over `bootstrap`'s ranks; the calling thread's current CUDA device is used.
  NcclCommunicator(const MpiCommunicator& bootstrap, std::string name);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  const char* backend() const override { return "nccl"; }
  void settle_stats() override;
  bool times_on_device() const override { return true; }

  struct Timings;  // the device's timings of operations and waits (CUDA events)

 protected:
  WorkPtr do_all_reduce(const at::Tensor& t, ReduceOp op, CallInfo info) override;
  WorkPtr do_reduce_scatter(const at::Tensor& in, const at::Tensor& out, ReduceOp op,
                            const std::vector<int64_t>& counts, CallInfo info) override;
  WorkPtr do_all_gather(const at::Tensor& in, const at::Tensor& out,
                        const std::vector<int64_t>& counts, CallInfo info) override;
  WorkPtr do_broadcast(const at::Tensor& t, int root, CallInfo info) override;
  WorkPtr do_all_to_all(const at::Tensor& in, const at::Tensor& out, const std::vector<int64_t>& send_counts,
                        const std::vector<int64_t>& recv_counts, CallInfo info) override;
  WorkPtr do_send(const at::Tensor& t, int dst, int tag, CallInfo info) override;
  WorkPtr do_recv(const at::Tensor& t, int src, int tag, CallInfo info) override;
  WorkPtr do_barrier(CallInfo info) override;
  SendRecv do_send_recv(const at::Tensor& send, int dst, int send_tag, const at::Tensor& recv, int src,
                        int recv_tag, CallInfo send_info, CallInfo recv_info) override;

 private:
  // Orders the communicator's stream after the compute stream and protects `tensors`.
  cudaStream_t enter(std::initializer_list<const at::Tensor*> tensors);
  WorkPtr leave(CallInfo info);  // the Work of what was just queued

  ncclComm_t comm_ = nullptr;
  c10::cuda::CUDAStream stream_;
  std::unique_ptr<Timings> timings_;
  // The start of the operation being posted (enter to leave). Events are shared: a Work keeps
  // its end event alive after the timings have read and dropped it (SharedEvent).
  std::shared_ptr<CUevent_st> begin_;
};

// Ends the job with a report when a NCCL communicator has failed asynchronously (a peer died, a
// network error): the host's waits call it while they poll (device_read.h).
void nccl_check_async_errors();

// The NCCL library's version, e.g. "2.28.9".
std::string nccl_version();

}  // namespace lft
