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

void check_context_parallel(const config::Config& cfg, const model::ModelConfig& model, int cp, int tp) {
  if (cp == 1) return;
  auto fail = [&](const std::string& what, const std::string& hint) {
    throw config::ConfigError("config error: " + cfg.where("mesh.cp") + ": " + what + "\n  hint: " + hint);
  };
  if (cfg.string("dist_config.cp_mode") == "ring") {
    if (model.attn_logit_softcapping > 0 || model.query_pre_attn_scalar > 0)
      fail("dist_config.cp_mode = \"ring\" cannot run this " + model.model_type +
               " model: its attention scores are soft-capped or scaled by query_pre_attn_scalar, which ring "
               "attention's blockwise softmax does not do",
           "use dist_config.cp_mode = \"ulysses\"");
    return;  // every rank keeps every head
  }
  const std::string n = std::to_string(cp);
  if (model.num_attention_heads % (cp * tp) != 0)
    fail("mesh.cp = " + n + (tp > 1 ? " x mesh.tp = " + std::to_string(tp) : std::string()) +
             " does not divide the model's " + std::to_string(model.num_attention_heads) +
             " attention heads: Ulysses gives each cp rank whole sequences of heads / " + (tp > 1 ? "(tp x cp)" : "cp") +
             " heads",
         "choose a cp that divides num_attention_heads" + std::string(tp > 1 ? " / tp" : ""));
}

}  // namespace lft::engine
