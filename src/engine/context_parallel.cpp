#include "lft/engine/context_parallel.h"

#include <ATen/ATen.h>

#include <string>

namespace lft::engine {

at::Tensor CommSequenceExchange::all_to_all(const at::Tensor& blocks) {
  const at::Tensor in = blocks.contiguous();
  at::Tensor out = at::empty_like(in);
  comm_.all_to_all(in, out);
  return out;
}

at::Tensor CommSequenceExchange::all_gather(const at::Tensor& piece) {
  const at::Tensor in = piece.contiguous();
  at::Tensor out = at::empty({in.numel() * comm_.size()}, in.options());
  comm_.all_gather(in, out);
  return out;
}

void CommSequenceExchange::shift(const at::Tensor& send, const at::Tensor& recv) {
  const int n = comm_.size(), me = comm_.rank();
  Communicator::SendRecv both = comm_.send_recv_async(send.contiguous(), (me + 1) % n, 0, recv, (me + n - 1) % n, 0);
  both.recv->wait();
  both.send->wait();
}

}  // namespace lft::engine
