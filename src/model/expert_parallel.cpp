// A MoE layer's rows sent to the ranks that hold their experts and back (expert_parallel.h).
#include "lft/model/expert_parallel.h"

#include <cstdlib>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "lft/runtime/host_transfer.h"

namespace lft::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// An exchange in two halves, so that the caller computes while the rows travel: PostRows
// posts them (its output a token that orders FinishRows after it), FinishRows waits and returns
// what arrived. In backward FinishRows posts the gradients back and PostRows waits for them, so the
// computation autograd runs between the two (what the forward ran between them) overlaps that
// exchange too.
struct Flight : torch::CustomClassHolder {
  Flight(std::shared_ptr<const ExpertExchange> e, std::vector<std::int64_t> s, std::vector<std::int64_t> r)
      : exchange(std::move(e)), send(std::move(s)), recv(std::move(r)) {}
  std::shared_ptr<const ExpertExchange> exchange;
  std::vector<std::int64_t> send, recv;
  at::Tensor posted;  // what is being sent, alive until it arrived
  std::unique_ptr<RowsInFlight> pending;
};

c10::intrusive_ptr<Flight> flight_of(AutogradContext* ctx) {
  return c10::static_intrusive_pointer_cast<Flight>(ctx->saved_data["flight"].toCapsule());
}

struct PostRows : public torch::autograd::Function<PostRows> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& rows, c10::intrusive_ptr<Flight> flight) {
    flight->posted = rows.contiguous();
    flight->pending = flight->exchange->post_rows(flight->posted, flight->send, flight->recv);
    ctx->saved_data["flight"] = c10::IValue::make_capsule(std::move(flight));
    return at::empty({0}, rows.options());
  }
  static variable_list backward(AutogradContext* ctx, variable_list) {
    const c10::intrusive_ptr<Flight> flight = flight_of(ctx);
    at::Tensor grad = flight->pending->wait();
    flight->pending.reset();
    flight->posted = at::Tensor();
    return {grad, at::Tensor()};
  }
};

struct FinishRows : public torch::autograd::Function<FinishRows> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& /*token: orders this after PostRows*/,
                            c10::intrusive_ptr<Flight> flight) {
    at::Tensor arrived = flight->pending->wait();
    flight->pending.reset();
    flight->posted = at::Tensor();
    ctx->saved_data["flight"] = c10::IValue::make_capsule(std::move(flight));
    return arrived;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const c10::intrusive_ptr<Flight> flight = flight_of(ctx);
    flight->posted = grads[0].contiguous();
    flight->pending = flight->exchange->post_rows(flight->posted, flight->recv, flight->send);
    return {at::zeros({0}, grads[0].options()), at::Tensor()};
  }
};

std::vector<std::int64_t> block_sums(const std::int64_t* counts, std::size_t ranks, std::size_t local) {
  std::vector<std::int64_t> out(ranks);
  for (std::size_t r = 0; r < ranks; ++r)
    out[r] = std::accumulate(counts + r * local, counts + (r + 1) * local, std::int64_t{0});
  return out;
}

// Experts' row counts cut in two at the expert boundary nearest half of the rows: the sizes of the
// experts before it (the others zero) and of those after it. Each expert's rows stay in one GEMM,
// so the halves compute what one call over all of them would, bit for bit.
std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> halves_by_expert(const std::vector<std::int64_t>& sizes) {
  const std::int64_t total = std::accumulate(sizes.begin(), sizes.end(), std::int64_t{0});
  std::size_t cut = 0;
  std::int64_t rows = 0, best = total;  // best: |2 x the rows before the cut - total| (cut 0's: total)
  for (std::size_t e = 0; e < sizes.size(); ++e) {
    rows += sizes[e];
    if (std::abs(2 * rows - total) < best) best = std::abs(2 * rows - total), cut = e + 1;
  }
  std::vector<std::int64_t> first(sizes.size(), 0), second(sizes.size(), 0);
  for (std::size_t e = 0; e < sizes.size(); ++e) (e < cut ? first : second)[e] = sizes[e];
  return {first, second};
}

}  // namespace

at::Tensor experts_across_ranks(const std::shared_ptr<const ExpertExchange>& exchange, const at::Tensor& rows,
                                const std::vector<std::int64_t>& per_expert, const LocalExperts& local_experts,
                                const std::function<void()>& meanwhile) {
  const auto ranks = static_cast<std::size_t>(exchange->size()), me = static_cast<std::size_t>(exchange->rank());
  const std::size_t experts = per_expert.size(), local = experts / ranks;
  if (local * ranks != experts)
    throw std::logic_error("experts_across_ranks: " + std::to_string(experts) + " experts over " +
                           std::to_string(ranks) + " ranks");
  // How many rows each rank sends this rank for each of its experts: [source][local expert].
  const at::Tensor mine = to_device(at::tensor(per_expert, at::TensorOptions().dtype(at::kLong)), rows.device());
  const at::Tensor theirs_t =
      host_read(exchange->exchange_counts(mine), "reading the row counts of every rank's experts");
  const std::int64_t* theirs = theirs_t.data_ptr<std::int64_t>();
  // The own block (rows routed to this rank's experts) stays: it is no part of either exchange.
  std::vector<std::int64_t> send = block_sums(per_expert.data(), ranks, local), recv = block_sums(theirs, ranks, local);
  const std::int64_t own = send[me];
  send[me] = recv[me] = 0;
  std::int64_t own_first = 0;
  for (std::size_t r = 0; r < me; ++r) own_first += send[r];
  const std::int64_t after_own = rows.size(0) - own_first - own;
  const at::Tensor leaving =
      own == 0 ? rows : at::cat({rows.narrow(0, 0, own_first), rows.narrow(0, own_first + own, after_own)});

  // The own rows in two halves, one computed during each exchange (and, in backward, each half's
  // backward during the exchange of the gradients that mirrors it).
  const std::vector<std::int64_t> own_sizes(per_expert.begin() + static_cast<std::ptrdiff_t>(me * local),
                                            per_expert.begin() + static_cast<std::ptrdiff_t>((me + 1) * local));
  const auto [sizes_a, sizes_b] = halves_by_expert(own_sizes);
  const std::int64_t first_half = std::accumulate(sizes_a.begin(), sizes_a.end(), std::int64_t{0});

  // There: the rows for the other ranks' experts leave; the first half of the own rows meanwhile.
  const auto there = c10::make_intrusive<Flight>(exchange, send, recv);
  const at::Tensor sent = PostRows::apply(leaving, there);
  const at::Tensor own_a = local_experts(rows.narrow(0, own_first, first_half), sizes_a);
  const at::Tensor arrived = FinishRows::apply(sent, there);  // (source, expert) order

  // What arrived regrouped by expert: for each local expert, its rows from every other source in
  // source order (`next[s]`: where source s's block of the current expert starts).
  std::vector<std::int64_t> by_expert, sizes(local, 0), next(ranks, 0);
  by_expert.reserve(static_cast<std::size_t>(arrived.size(0)));
  for (std::size_t s = 1; s < ranks; ++s) next[s] = next[s - 1] + recv[s - 1];
  for (std::size_t e = 0; e < local; ++e)
    for (std::size_t s = 0; s < ranks; ++s) {
      if (s == me) continue;
      const std::int64_t n = theirs[s * local + e];
      for (std::int64_t i = 0; i < n; ++i) by_expert.push_back(next[s] + i);
      next[s] += n;
      sizes[e] += n;
    }
  const auto index = [&](const std::vector<std::int64_t>& v) {
    return to_device(at::tensor(v, at::TensorOptions().dtype(at::kLong)), rows.device());
  };
  const at::Tensor their_out = local_experts(arrived.index_select(0, index(by_expert)), sizes);
  // Back to (source, expert) order: position p of `arrived` takes row back[p] of their_out.
  std::vector<std::int64_t> back(by_expert.size());
  for (std::size_t i = 0; i < by_expert.size(); ++i) back[static_cast<std::size_t>(by_expert[i])] = static_cast<std::int64_t>(i);

  // Home: the outputs go back the reverse way; the caller's own work and the second half of the
  // own rows meanwhile.
  const auto home = c10::make_intrusive<Flight>(exchange, recv, send);
  const at::Tensor returning = PostRows::apply(their_out.index_select(0, index(back)), home);
  if (meanwhile) meanwhile();
  const at::Tensor own_b = local_experts(rows.narrow(0, own_first + first_half, own - first_half), sizes_b);
  const at::Tensor returned = FinishRows::apply(returning, home);  // the rows' order, the own block left out
  return at::cat({returned.narrow(0, 0, own_first), own_a, own_b, returned.narrow(0, own_first, after_own)});
}

}  // namespace lft::model
