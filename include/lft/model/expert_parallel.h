// Expert parallelism on the model's side: a MoE layer whose experts are spread over the
// expert-parallel ranks sends each routed row to the rank that holds its expert, computes the rows
// it receives with its own experts, and sends the outputs back (docs/moe.md, "Expert
// parallelism"). The model knows no communicator: the engine layer implements ExpertExchange over
// the mesh's expert-parallel group (engine/expert_parallel.h).
//
// Per layer and forward: the routed rows' counts per expert are exchanged first (one all-to-all
// of E integers, read on the host to size the buffers), then the rows for other ranks' experts
// (an all-to-all with uneven sizes; the rows for this rank's own experts stay), during which the
// rank computes half of its own rows; the received rows are regrouped from (source rank, expert)
// order to (expert, source rank) order, the local experts' grouped GEMMs run, and the outputs take
// the reverse way, during which the rank computes the other half of its own rows. Backward is the
// mirror image: each exchange of gradients travels during one half's backward. Dropless: each
// row reaches its expert whatever the routing, so the result equals the one-rank layer's (the
// GEMMs see other row blocks, hence equal to rounding).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

namespace lft::model {

// Rows on their way (ExpertExchange::post_rows): wait() returns what arrived.
class RowsInFlight {
 public:
  virtual ~RowsInFlight() = default;
  virtual at::Tensor wait() = 0;
};

class ExpertExchange {
 public:
  virtual ~ExpertExchange() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // counts [size() * n] int64 on the model's device, block r for rank r; returns the same shape
  // with rank r's block for this rank at block r.
  virtual at::Tensor exchange_counts(const at::Tensor& counts) const = 0;
  // rows [sum(send), H]: send[r] consecutive rows for rank r; wait() on the result returns
  // [sum(recv), H]: recv[r] consecutive rows from rank r (every rank's send to this rank is this
  // rank's recv). Every send and receive is posted before it returns, so that the caller computes
  // meanwhile; `rows` must stay alive until wait() returned.
  virtual std::unique_ptr<RowsInFlight> post_rows(const at::Tensor& rows, const std::vector<std::int64_t>& send,
                                                  const std::vector<std::int64_t>& recv) const = 0;
};

// The local experts of a layer over rows grouped by expert: sizes[e] rows for local expert e.
using LocalExperts = std::function<at::Tensor(const at::Tensor& rows, const std::vector<std::int64_t>& sizes)>;

// rows [R, H] grouped by global expert (per_expert[e] rows for expert e of E; rank r holds
// experts [r E / size, (r + 1) E / size)); returns each row's output from its expert, in the same
// order, computed by the rank that holds the expert. Differentiable: the backward sends the
// outputs' gradients to the expert's rank and the rows' gradients back. Collective over the
// exchange's ranks. `meanwhile` (may be empty): the caller's computation that needs no expert
// (a shared expert), run while the outputs travel home, so that its backward runs while their
// gradients leave.
at::Tensor experts_across_ranks(const std::shared_ptr<const ExpertExchange>& exchange, const at::Tensor& rows,
                                const std::vector<std::int64_t>& per_expert, const LocalExperts& local_experts,
                                const std::function<void()>& meanwhile = {});

}  // namespace lft::model
