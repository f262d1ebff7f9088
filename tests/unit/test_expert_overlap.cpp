// Expert parallelism's overlap (model/expert_parallel.h): a rank computes half of its own rows
// while the rows for the other ranks travel and the other half while their outputs come back, and
// in backward each exchange of gradients travels during one half's backward. A recording exchange
// (rank 0 of 2; the other rank routes nothing here) and recording experts show the order of posts,
// waits and computations, forward and backward.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <torch/torch.h>

#include "lft/model/expert_parallel.h"

namespace lft::model {
namespace {

using Events = std::vector<std::string>;

class RecordingExchange final : public ExpertExchange {
 public:
  explicit RecordingExchange(Events& events) : events_(events) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  at::Tensor exchange_counts(const at::Tensor& counts) const override {
    // Rank 1 routes nothing to rank 0: rank 0 receives only its own rows.
    at::Tensor theirs = at::zeros_like(counts);
    theirs.narrow(0, 0, counts.size(0) / 2).copy_(counts.narrow(0, 0, counts.size(0) / 2));
    return theirs;
  }
  std::unique_ptr<RowsInFlight> post_rows(const at::Tensor& rows, const std::vector<std::int64_t>& send,
                                          const std::vector<std::int64_t>& recv) const override {
    events_.push_back("post " + std::to_string(send[1]) + " rows");
    struct Pending final : RowsInFlight {
      Pending(Events& e, at::Tensor out) : events(e), out(std::move(out)) {}
      at::Tensor wait() override {
        events.push_back("wait");
        return out;
      }
      Events& events;
      at::Tensor out;
    };
    // The own block never travels; what arrives from the other rank: zeros.
    EXPECT_EQ(send[0], 0);
    EXPECT_EQ(recv[0], 0);
    EXPECT_EQ(rows.size(0), send[1]);
    return std::make_unique<Pending>(events_, at::zeros({recv[1], rows.size(1)}, rows.options()));
  }

 private:
  Events& events_;
};

// Each expert's "MLP": the rows times 2, its backward recorded.
struct RecordedExperts : torch::autograd::Function<RecordedExperts> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& rows, const std::string& name,
                            Events* events) {
    events->push_back("compute " + name + " " + std::to_string(rows.size(0)));
    ctx->saved_data["name"] = name;
    ctx->saved_data["events"] = reinterpret_cast<std::int64_t>(events);
    return rows * 2;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* events = reinterpret_cast<Events*>(ctx->saved_data["events"].toInt());
    events->push_back("backward " + ctx->saved_data["name"].toStringRef());
    return {grads[0] * 2, at::Tensor(), at::Tensor()};
  }
};

TEST(ExpertOverlap, OwnRowsComputeWhileTheOthersTravel) {
  Events events;
  auto exchange = std::make_shared<RecordingExchange>(events);
  // 4 experts, 2 a rank: 3 + 1 rows for rank 0's experts, 2 + 2 for rank 1's.
  const at::Tensor rows = torch::arange(8 * 3, torch::kFloat).view({8, 3}).requires_grad_();
  const std::vector<std::string> calls = {"own-a", "arrived", "own-b"};
  std::vector<std::vector<std::int64_t>> sizes;
  std::size_t call = 0;
  const at::Tensor out = experts_across_ranks(exchange, rows, {3, 1, 2, 2},
                                              [&](const at::Tensor& r, const std::vector<std::int64_t>& s) {
                                                sizes.push_back(s);
                                                return RecordedExperts::apply(r, calls.at(call++), &events);
                                              },
                                              [&] { events.push_back("meanwhile"); });
  // The 4 rows for rank 1 leave, the own rows of the first half are computed, then the wait; rank
  // 1 sent nothing here, so the arrived call has no rows; then the outputs' way home (none), during
  // which the caller's own work (a shared expert) and the other half are computed.
  EXPECT_EQ(events, (Events{"post 4 rows", "compute own-a 3", "wait", "compute arrived 0", "post 0 rows", "meanwhile",
                            "compute own-b 1", "wait"}));
  // The halves cut at the expert boundary nearest half of the 4 own rows: expert 0's 3, expert 1's 1.
  EXPECT_EQ(sizes, (std::vector<std::vector<std::int64_t>>{{3, 0}, {0, 0}, {0, 1}}));
  // The own rows' outputs are at their places, rank 1's rows' as what the fake returns (zeros).
  EXPECT_TRUE(at::equal(out.narrow(0, 0, 4), rows.narrow(0, 0, 4) * 2));
  EXPECT_TRUE(at::equal(out.narrow(0, 4, 4), at::zeros({4, 3})));
  events.clear();
  out.narrow(0, 0, 4).sum().backward();
  // Backward: the outputs' gradients posted to rank 1, the second half's backward while they
  // travel, the wait, the arrived rows' backward, their gradients posted home, the first half's
  // backward while they travel, the wait.
  EXPECT_EQ(events, (Events{"post 4 rows", "backward own-b", "wait", "backward arrived", "post 0 rows",
                            "backward own-a", "wait"}));
  EXPECT_TRUE(at::equal(rows.grad().narrow(0, 0, 4), at::full({4, 3}, 2.0f)));
}

}  // namespace
}  // namespace lft::model
