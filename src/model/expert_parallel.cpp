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

}  // namespace

at::Tensor experts_across_ranks(const std::shared_ptr<const ExpertExchange>& exchange, const at::Tensor& rows,
                                const std::vector<std::int64_t>& per_expert, const LocalExperts& local_experts) {
  const auto ranks = static_cast<std::size_t>(exchange->size());
  const std::size_t experts = per_expert.size(), local = experts / ranks;
  if (local * ranks != experts)
    throw std::logic_error("experts_across_ranks: " + std::to_string(experts) + " experts over " +
                           std::to_string(ranks) + " ranks");
  // How many rows each rank sends this rank for each of its experts: [source][local expert].
  const at::Tensor mine = at::tensor(per_expert, at::TensorOptions().dtype(at::kLong)).to(rows.device());
  const at::Tensor theirs_t = exchange->exchange_counts(mine).cpu();
  const std::int64_t* theirs = theirs_t.data_ptr<std::int64_t>();
  std::vector<std::int64_t> send(ranks), recv(ranks);
  for (std::size_t r = 0; r < ranks; ++r) {
    send[r] = std::accumulate(per_expert.begin() + static_cast<std::ptrdiff_t>(r * local),
                              per_expert.begin() + static_cast<std::ptrdiff_t>((r + 1) * local), std::int64_t{0});
    recv[r] = std::accumulate(theirs + r * local, theirs + (r + 1) * local, std::int64_t{0});
  }
  const auto holder = c10::make_intrusive<ExchangeHolder>(exchange);
  const at::Tensor arrived = ExchangeRows::apply(rows, holder, send, recv);  // (source, expert) order

  // Regrouped by expert: for each local expert, its rows from every source in source order
  // (`next[s]`: where source s's block of the current expert starts in `arrived`).
  std::vector<std::int64_t> by_expert, sizes(local, 0), next(ranks, 0);
  by_expert.reserve(static_cast<std::size_t>(arrived.size(0)));
  for (std::size_t s = 1; s < ranks; ++s) next[s] = next[s - 1] + recv[s - 1];
  for (std::size_t e = 0; e < local; ++e) {
    for (std::size_t s = 0; s < ranks; ++s) {
      const std::int64_t n = theirs[s * local + e];
      for (std::int64_t i = 0; i < n; ++i) by_expert.push_back(next[s] + i);
      next[s] += n;
      sizes[e] += n;
    }
  }
  std::vector<std::int64_t> back(by_expert.size());  // the inverse permutation
  for (std::size_t i = 0; i < by_expert.size(); ++i) back[static_cast<std::size_t>(by_expert[i])] = static_cast<std::int64_t>(i);
  const auto index = [&](const std::vector<std::int64_t>& v) {
    return at::tensor(v, at::TensorOptions().dtype(at::kLong)).to(rows.device());
  };
  const at::Tensor outputs = local_experts(arrived.index_select(0, index(by_expert)), sizes);
  // Back to (source, expert) order, and home.
  return ExchangeRows::apply(outputs.index_select(0, index(back)), holder, recv, send);
}

}  // namespace lft::model
