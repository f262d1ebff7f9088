// The MPI backend, for CPU tensors, or for GPU tensors staged through host memory (on_device:
// the run mode in which several ranks share one GPU, which NCCL refuses). fp32/fp64/int32/int64 reduce natively; bf16/fp16 are reduced
// in fp32 (upcast, reduce, round once) so a sum never accumulates in 16 bits. Moves (gather,
// broadcast, send/recv) take any dtype as raw bytes. Every call is non-blocking underneath
// (MPI_I*), so waits are covered by the watchdog.
#pragma once

#include <mpi.h>

#include "lft/comm/communicator.h"

namespace lft {

class MpiCommunicator : public Communicator {
 public:
  // Wraps `comm`; frees it on destruction when `owned`.
  MpiCommunicator(MPI_Comm comm, std::string name, bool owned, at::Device device = at::kCPU);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  // A sub-communicator of the ranks with the same `color`, ordered by `key` (MPI_Comm_split,
  // under the watchdog's set-up deadline).
  std::unique_ptr<MpiCommunicator> split(int color, int key, std::string name) const;

  // The same group on a duplicate MPI communicator, taking tensors on `device` (a GPU: each
  // operation copies them to host memory and back). Collective.
  std::unique_ptr<MpiCommunicator> on_device(at::Device device) const;

  MPI_Comm handle() const { return comm_; }
  const char* backend() const override { return "mpi"; }
  bool sums_16bit_into_fp32() const override { return true; }

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
  std::uint64_t wire_bytes(const at::Tensor& t, bool reduction) const override;

 private:
  bool staged() const;  // tensors on a GPU travel through host copies

  MPI_Comm comm_;
  bool owned_;
};

}  // namespace lft
