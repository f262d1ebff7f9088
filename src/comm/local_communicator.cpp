#include "lft/comm/local_communicator.h"

#include <ATen/ATen.h>

#include <stdexcept>

#include "lft/runtime/stream_event.h"

namespace lft {
namespace {

// Complete when posted on the CPU. On a GPU the result is queued on the caller's current stream
// (at offload's gather, the side stream): waiting makes the then-current stream (compute) wait
// for that point, and the written tensor is kept from reuse until the posting stream is past it.
class LocalWork final : public Work {
 public:
  LocalWork(std::string what, CollStats* stats, const at::Device& device, const at::Tensor* written,
            const at::Tensor* read)
      : Work(std::move(what), stats), posted_(device, {written, read}) {
    if (device.is_cpu()) test();
  }
  ~LocalWork() override { finish_in_destructor(); }

 protected:
  void block() override { posted_.order_current_stream(); }
  bool poll() override { return posted_.complete(); }

 private:
  PostedOnStream posted_;
};

void require_self(int peer, const char* what) {
  if (peer != 0)
    throw std::invalid_argument(std::string(what) + ": rank " + std::to_string(peer) +
                                " in a group of one rank (only rank 0 exists)");
}

}  // namespace

LocalCommunicator::LocalCommunicator(std::string name, at::Device device)
    : Communicator(std::move(name), 0, 1, device) {}

WorkPtr LocalCommunicator::done(CallInfo info, const at::Tensor* written, const at::Tensor* read) const {
  return std::make_unique<LocalWork>(std::move(info.what), info.stats, device(), written, read);
}

WorkPtr LocalCommunicator::do_all_reduce(const at::Tensor&, ReduceOp, CallInfo info) {
  return done(std::move(info));  // sum, mean and max of one value
}

WorkPtr LocalCommunicator::do_reduce_scatter(const at::Tensor& in, const at::Tensor& out, ReduceOp,
                                             const std::vector<int64_t>&, CallInfo info) {
  out.copy_(in);
  return done(std::move(info), &out, &in);
}

WorkPtr LocalCommunicator::do_all_gather(const at::Tensor& in, const at::Tensor& out,
                                         const std::vector<int64_t>&, CallInfo info) {
  out.copy_(in);
  return done(std::move(info), &out, &in);
}

WorkPtr LocalCommunicator::do_all_to_all(const at::Tensor& in, const at::Tensor& out, const std::vector<int64_t>&,
                                         const std::vector<int64_t>&, CallInfo info) {
  out.copy_(in);
  return done(std::move(info), &out, &in);
}

WorkPtr LocalCommunicator::do_broadcast(const at::Tensor&, int root, CallInfo info) {
  require_self(root, "broadcast root");
  return done(std::move(info));
}

WorkPtr LocalCommunicator::do_send(const at::Tensor& t, int dst, int tag, CallInfo info) {
  require_self(dst, "send to");
  sent_[tag].push_back(t.clone());
  return done(std::move(info));
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
  return done(std::move(info), &t);
}

WorkPtr LocalCommunicator::do_barrier(CallInfo info) { return done(std::move(info)); }

}  // namespace lft
