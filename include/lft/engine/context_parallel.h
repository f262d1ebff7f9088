// Context parallelism on the mesh's cp dim: the model's sequence exchange over the cp
// communicator (the checks that a run can split its sequences: parallel_config.h).
#pragma once

#include <memory>

#include "lft/comm/communicator.h"
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

}  // namespace lft::engine
