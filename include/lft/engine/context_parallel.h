// Context parallelism on the mesh's cp dim: the model's sequence exchange over the cp
// communicator, and the checks that a run's model and engine can split its sequences.
#pragma once

#include <memory>

#include "lft/comm/communicator.h"
#include "lft/config/config.h"
#include "lft/model/context_parallel.h"
#include "lft/model/model_config.h"

namespace lft::engine {

struct RunPlan;

// model::SequenceExchange over `comm` (the mesh's device cp communicator; not owned).
class CommSequenceExchange final : public model::SequenceExchange {
 public:
  // ring: cp_mode = "ring" (ring attention), else Ulysses.
  CommSequenceExchange(Communicator& comm, bool ring) : comm_(comm), ring_(ring) {}
  int size() const override { return comm_.size(); }
  int rank() const override { return comm_.rank(); }
  at::Tensor all_to_all(const at::Tensor& blocks) override;
  at::Tensor all_gather(const at::Tensor& piece) override;
  void shift(const at::Tensor& send, const at::Tensor& recv) override;
  bool ring() const override { return ring_; }
  Communicator& communicator() const { return comm_; }

 private:
  Communicator& comm_;
  bool ring_;
};

// ConfigError naming the keys when [mesh] cp > 1 cannot run: under Ulysses, attention heads that
// do not divide over cp (x tp) (each cp rank attends with a share of them; key/value heads that do
// not divide are repeated per query head before the exchange). Ring attention keeps every head.
void check_context_parallel(const config::Config& cfg, const model::ModelConfig& model, int cp, int tp);

}  // namespace lft::engine
