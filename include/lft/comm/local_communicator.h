// A group of one rank: each collective's result is its input, computed on the calling thread's
// stream with no library call. The device mesh uses it for every dimension of size 1 on a GPU,
// so that a one-GPU run creates no NCCL communicator (each costs start-up time and device memory)
// and stages nothing through host memory. Calls are checked and counted as on every backend.
#pragma once

#include <deque>
#include <map>

#include "lft/comm/communicator.h"

namespace lft {

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::string name, at::Device device);
  const char* backend() const override { return "local"; }

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

 private:
  // The Work of an operation just queued; `written` and `read`, the tensors it wrote and read
  // (null: none), kept from the allocator until the posting stream is past them.
  WorkPtr done(CallInfo info, const at::Tensor* written = nullptr, const at::Tensor* read = nullptr) const;
  std::map<int, std::deque<at::Tensor>> sent_;  // sends to itself by tag, until received
};

}  // namespace lft
