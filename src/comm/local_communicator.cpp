#include "lft/comm/local_communicator.h"

#include <ATen/ATen.h>

#include <stdexcept>

namespace lft {
namespace {

// Complete when posted: the result is already queued on the caller's stream.
class DoneWork final : public Work {
 public:
  DoneWork(std::string what, CollStats* stats) : Work(std::move(what), stats) { test(); }

 protected:
  void block() override {}
  bool poll() override { return true; }
};

void require_self(int peer, const char* what) {
  if (peer != 0)
    throw std::invalid_argument(std::string(what) + ": rank " + std::to_string(peer) +
                                " in a group of one rank (only rank 0 exists)");
}

}  // namespace

LocalCommunicator::LocalCommunicator(std::string name, at::Device device)
    : Communicator(std::move(name), 0, 1, device) {}

WorkPtr LocalCommunicator::do_all_reduce(const at::Tensor&, ReduceOp, CallInfo info) {
  return std::make_unique<DoneWork>(std::move(info.what), info.stats);  // sum, mean and max of one value
}

WorkPtr LocalCommunicator::do_reduce_scatter(const at::Tensor& in, const at::Tensor& out, ReduceOp,
                                             const std::vector<int64_t>&, CallInfo info) {
  out.copy_(in);
  return std::make_unique<DoneWork>(std::move(info.what), info.stats);
}

WorkPtr LocalCommunicator::do_all_gather(const at::Tensor& in, const at::Tensor& out,
                                         const std::vector<int64_t>&, CallInfo info) {
  out.copy_(in);
  return std::make_unique<DoneWork>(std::move(info.what), info.stats);
}

WorkPtr LocalCommunicator::do_all_to_all(const at::Tensor& in, const at::Tensor& out, CallInfo info) {
  out.copy_(in);
  return std::make_unique<DoneWork>(std::move(info.what), info.stats);
}

WorkPtr LocalCommunicator::do_broadcast(const at::Tensor&, int root, CallInfo info) {
  require_self(root, "broadcast root");
  return std::make_unique<DoneWork>(std::move(info.what), info.stats);
}

WorkPtr LocalCommunicator::do_send(const at::Tensor& t, int dst, int tag, CallInfo info) {
  require_self(dst, "send to");
  sent_[tag].push_back(t.clone());
  return std::make_unique<DoneWork>(std::move(info.what), info.stats);
}

WorkPtr LocalCommunicator::do_recv(const at::Tensor& t, int src, int tag, CallInfo info) {
  require_self(src, "recv from");
  auto it = sent_.find(tag);
  if (it == sent_.end() || it->second.empty())
    throw std::logic_error("recv from rank 0 (itself), tag " + std::to_string(tag) + " on communicator '" + name() +
                           "': nothing was sent with that tag first");
  const at::Tensor message = std::move(it->second.front());
  it->second.pop_front();
  if (message.numel() != t.numel() || message.scalar_type() != t.scalar_type())
    throw std::invalid_argument("recv on communicator '" + name() + "': the message has " +
                                std::to_string(message.numel()) + " elements of another shape or dtype than the buffer's " +
                                std::to_string(t.numel()));
  t.copy_(message.view(t.sizes()));
  return std::make_unique<DoneWork>(std::move(info.what), info.stats);
}

WorkPtr LocalCommunicator::do_barrier(CallInfo info) { return std::make_unique<DoneWork>(std::move(info.what), info.stats); }

}  // namespace lft
