// An expert capacity (moe_expert_capacity_factor, Megatron's): a MoE block's output against the
// routing written out here pair by pair: each expert keeps at most ceil(rows * k / E * factor) of
// its (row, expert) pairs, those with the highest routing weights ("probs"; equal weights: the
// earlier pair) or its first ones ("position"); a dropped pair adds nothing to its row. The
// record counts the dropped pairs; a capacity no expert reaches equals the dropless block bitwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include <torch/torch.h>

#include "fixture_util.h"
#include "lft/model/model_config.h"
#include "lft/model/moe.h"

namespace lft::model {
namespace {

ModelConfig tiny_moe() {
  ModelConfig c = ModelConfig::from_hf_folder(fixture_dir("qwen3-moe-tiny"));  // 4 experts, top 2
  c.moe.output_router_logits = false;
  return c;
}

SparseMoeBlock random_block(const ModelConfig& c) {
  torch::manual_seed(3);
  SparseMoeBlock block(c);
  torch::NoGradGuard no_grad;
  for (auto& p : block->parameters()) p.normal_(0.0, 0.3);
  return block;
}

struct Routed {
  at::Tensor out;
  double dropped = 0;
};

Routed run(SparseMoeBlock block, const at::Tensor& x) {
  auto record = std::make_shared<RoutingRecord>(1, 0.0);
  return {block->forward(x, {}, record, 0, 1), record->dropped[0]};
}

// The block's output with the routing done here: every (row, expert) pair, each expert keeping
// `capacity` of them by the policy; `dropped` counts the others.
at::Tensor expected(SparseMoeBlock block, const ModelConfig& c, const at::Tensor& x, std::int64_t capacity,
                    bool by_position, std::int64_t& dropped) {
  const std::int64_t k = c.moe.experts_per_token, experts = c.moe.num_experts;
  const at::Tensor flat = x.reshape({-1, c.hidden_size});
  const at::Tensor probs = at::softmax(at::linear(flat, block->gate->weight), -1, at::kFloat);
  auto [weights, chosen] = at::topk(probs, k, -1);
  if (c.moe.normalize_top_k) weights = weights / weights.sum(-1, true);
  const std::int64_t pairs = flat.size(0) * k;
  const float* w = weights.contiguous().data_ptr<float>();
  const std::int64_t* e_of = chosen.contiguous().data_ptr<std::int64_t>();
  std::vector<at::Tensor> rows(static_cast<std::size_t>(flat.size(0)), at::zeros({c.hidden_size}));
  dropped = 0;
  for (std::int64_t e = 0; e < experts; ++e) {
    std::vector<std::int64_t> mine;
    for (std::int64_t p = 0; p < pairs; ++p)
      if (e_of[p] == e) mine.push_back(p);
    if (!by_position)
      std::stable_sort(mine.begin(), mine.end(), [&](std::int64_t a, std::int64_t b) { return w[a] > w[b]; });
    const auto kept = static_cast<std::size_t>(std::min<std::int64_t>(capacity, static_cast<std::int64_t>(mine.size())));
    dropped += static_cast<std::int64_t>(mine.size() - kept);
    const auto& ex = block->expert_list[static_cast<std::size_t>(e)];
    for (std::size_t i = 0; i < kept; ++i) {
      const std::int64_t row = mine[i] / k;
      const at::Tensor xr = flat[row];
      const at::Tensor h = at::silu(at::mv(ex->gate_proj->weight, xr)) * at::mv(ex->up_proj->weight, xr);
      auto& sum = rows[static_cast<std::size_t>(row)];
      sum = sum + w[mine[i]] * at::mv(ex->down_proj->weight, h);
    }
  }
  return at::stack(rows).view(x.sizes());
}

TEST(MoeCapacity, EachPolicyKeepsTheRightPairsAndCountsTheRest) {
  for (const bool by_position : {false, true}) {
    SCOPED_TRACE(by_position ? "position" : "probs");
    ModelConfig c = tiny_moe();
    c.moe.capacity_factor = 0.5;
    c.moe.drop_by_position = by_position;
    SparseMoeBlock block = random_block(c);
    const at::Tensor x = torch::randn({2, 9, c.hidden_size});
    const std::int64_t capacity = c.moe.expert_capacity(18);
    EXPECT_EQ(capacity, static_cast<std::int64_t>(std::ceil(18.0 * 2 / 4 * 0.5)));  // Megatron's get_capacity
    std::int64_t dropped = 0;
    const at::Tensor want = expected(block, c, x, capacity, by_position, dropped).detach();
    ASSERT_GT(dropped, 0) << "the case must drop pairs";
    torch::NoGradGuard no_grad;
    const Routed got = run(block, x);
    EXPECT_LT((got.out - want).abs().max().item<double>(), 1e-5);
    EXPECT_EQ(got.dropped, static_cast<double>(dropped));
  }
}

TEST(MoeCapacity, ACapacityNoExpertReachesIsDropless) {
  ModelConfig dropless = tiny_moe(), roomy = tiny_moe();
  roomy.moe.capacity_factor = 4.0;  // capacity = rows * k: every pair fits
  const at::Tensor x = torch::randn({2, 9, dropless.hidden_size});
  const Routed a = run(random_block(dropless), x), b = run(random_block(roomy), x);
  EXPECT_TRUE(at::equal(a.out, b.out));
  EXPECT_EQ(b.dropped, 0.0);
}

// The experts' weight gradients come from the kept pairs only (the reference's routing weights
// are constants, so the router's and the input's gradients are not compared).
TEST(MoeCapacity, ExpertGradientsFollowTheKeptPairs) {
  ModelConfig c = tiny_moe();
  c.moe.capacity_factor = 0.25;
  SparseMoeBlock block = random_block(c);
  const at::Tensor x = torch::randn({2, 9, c.hidden_size});
  auto expert_grads = [&] {
    std::vector<at::Tensor> g;
    for (const auto& ex : block->expert_list)
      for (const auto& p : ex->parameters()) g.push_back(p.grad().clone());
    block->zero_grad();
    return g;
  };
  run(block, x).out.sum().backward();
  const std::vector<at::Tensor> got = expert_grads();
  std::int64_t dropped = 0;
  expected(block, c, x, c.moe.expert_capacity(18), false, dropped).sum().backward();
  ASSERT_GT(dropped, 0);
  const std::vector<at::Tensor> want = expert_grads();
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_LT((got[i] - want[i]).abs().max().item<double>(), 1e-5) << i;
}

}  // namespace
}  // namespace lft::model
