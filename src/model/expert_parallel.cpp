// A MoE layer's rows sent to the ranks that hold their experts and back (expert_parallel.h).
#include "lft/model/expert_parallel.h"

#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

namespace lft::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct ExchangeHolder : torch::CustomClassHolder {
  explicit ExchangeHolder(std::shared_ptr<const ExpertExchange> e) : exchange(std::move(e)) {}
  std::shared_ptr<const ExpertExchange> exchange;
};

// Rows to their ranks in forward; their gradients back the reverse way in backward.
struct ExchangeRows : public torch::autograd::Function<ExchangeRows> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& rows, c10::intrusive_ptr<ExchangeHolder> holder,
                            std::vector<std::int64_t> send, std::vector<std::int64_t> recv) {
    at::Tensor out = holder->exchange->exchange_rows(rows.contiguous(), send, recv);
    ctx->saved_data["exchange"] = c10::IValue::make_capsule(std::move(holder));
    ctx->saved_data["send"] = send;
    ctx->saved_data["recv"] = recv;
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto holder = c10::static_intrusive_pointer_cast<ExchangeHolder>(ctx->saved_data["exchange"].toCapsule());
    const std::vector<std::int64_t> send = ctx->saved_data["send"].toIntVector(),
                                    recv = ctx->saved_data["recv"].toIntVector();
    return {holder->exchange->exchange_rows(grads[0].contiguous(), recv, send), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// The same exchange in two halves, so that the caller computes while the rows travel: PostRows
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

}  // namespace

at::Tensor experts_across_ranks(const std::shared_ptr<const ExpertExchange>& exchange, const at::Tensor& rows,
                                const std::vector<std::int64_t>& per_expert, const LocalExperts& local_experts) {
  const auto ranks = static_cast<std::size_t>(exchange->size()), me = static_cast<std::size_t>(exchange->rank());
  const std::size_t experts = per_expert.size(), local = experts / ranks;
  if (local * ranks != experts)
    throw std::logic_error("experts_across_ranks: " + std::to_string(experts) + " experts over " +
                           std::to_string(ranks) + " ranks");
  // How many rows each rank sends this rank for each of its experts: [source][local expert].
  const at::Tensor mine = at::tensor(per_expert, at::TensorOptions().dtype(at::kLong)).to(rows.device());
  const at::Tensor theirs_t = exchange->exchange_counts(mine).cpu();
  const std::int64_t* theirs = theirs_t.data_ptr<std::int64_t>();
  const std::vector<std::int64_t> send = block_sums(per_expert.data(), ranks, local), recv = block_sums(theirs, ranks, local);
  std::int64_t own_first = 0;
  for (std::size_t r = 0; r < me; ++r) own_first += send[r];

  // The rows for the other ranks' experts leave; this rank's own rows (already grouped by its
  // experts) are computed while they travel, then the rows that arrived.
  const auto flight = c10::make_intrusive<Flight>(exchange, send, recv);
  const at::Tensor token = PostRows::apply(rows, flight);
  const std::vector<std::int64_t> own_sizes(per_expert.begin() + static_cast<std::ptrdiff_t>(me * local),
                                            per_expert.begin() + static_cast<std::ptrdiff_t>((me + 1) * local));
  const at::Tensor own_out = local_experts(rows.narrow(0, own_first, send[me]), own_sizes);
  const at::Tensor arrived = FinishRows::apply(token, flight);  // (source, expert) order, own block too

  // The other sources' rows regrouped by expert: for each local expert, its rows from every other
  // source in source order (`next[s]`: where source s's block of the current expert starts).
  std::vector<std::int64_t> by_expert, sizes(local, 0), next(ranks, 0);
  by_expert.reserve(static_cast<std::size_t>(arrived.size(0)));
  for (std::size_t s = 1; s < ranks; ++s) next[s] = next[s - 1] + recv[s - 1];
  for (std::size_t e = 0; e < local; ++e) {
    for (std::size_t s = 0; s < ranks; ++s) {
      const std::int64_t n = theirs[s * local + e];
      if (s != me)
        for (std::int64_t i = 0; i < n; ++i) by_expert.push_back(next[s] + i);
      next[s] += n;
      if (s != me) sizes[e] += n;
    }
  }
  const auto index = [&](const std::vector<std::int64_t>& v) {
    return at::tensor(v, at::TensorOptions().dtype(at::kLong)).to(rows.device());
  };
  const at::Tensor their_out = local_experts(arrived.index_select(0, index(by_expert)), sizes);
  // Back to (source, expert) order: position p of `arrived` takes row back[p] of [their_out; own_out].
  std::vector<std::int64_t> back(static_cast<std::size_t>(arrived.size(0)));
  for (std::size_t i = 0; i < by_expert.size(); ++i) back[static_cast<std::size_t>(by_expert[i])] = static_cast<std::int64_t>(i);
  std::int64_t own_at = 0;
  for (std::size_t s = 0; s < me; ++s) own_at += recv[s];
  for (std::int64_t i = 0; i < recv[me]; ++i)
    back[static_cast<std::size_t>(own_at + i)] = static_cast<std::int64_t>(by_expert.size()) + i;
  const at::Tensor outputs = at::cat({their_out, own_out}).index_select(0, index(back));
  // Home.
  return ExchangeRows::apply(outputs, c10::make_intrusive<ExchangeHolder>(exchange), recv, send);
}

}  // namespace lft::model
