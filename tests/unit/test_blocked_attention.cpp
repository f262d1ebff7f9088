// Blocked causal attention (model/blocked_attention.h) against LibTorch's scaled_dot_product_attention:
// in float64 the same function to rounding (so the blocks, the diagonal masks and the grouping of
// query heads are right), output and every input gradient; in bf16 within what bf16 scores allow,
// against the same attention computed in fp32.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/autograd.h>

#include <vector>

#include "lft/model/blocked_attention.h"

namespace lft::model {
namespace {

at::Tensor randn(std::vector<std::int64_t> shape, std::uint64_t seed, at::ScalarType dtype) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn(shape, gen, at::TensorOptions().dtype(at::kFloat)).to(dtype).requires_grad_(true);
}

struct Outcome {
  at::Tensor out, dq, dk, dv;
};

template <typename Attention>
Outcome run(Attention attention, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g) {
  const at::Tensor out = attention(q, k, v);
  const auto grads = torch::autograd::grad({out}, {q, k, v}, {g});
  return {out, grads[0], grads[1], grads[2]};
}

double gap(const at::Tensor& a, const at::Tensor& b) { return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>(); }

// Sequence lengths around the block (128 rows): one block, a whole number of them, a tail.
const std::vector<std::int64_t> kLengths{100, 256, 300};

TEST(BlockedAttention, Float64EqualsScaledDotProductAttentionWithGroupedHeads) {
  for (const std::int64_t t : kLengths) {
    const std::int64_t b = 2, heads = 6, kv_heads = 2, d = 16;
    const double scale = 0.3;
    const at::Tensor q = randn({b, heads, t, d}, 1, at::kDouble), k = randn({b, kv_heads, t, d}, 2, at::kDouble),
                     v = randn({b, kv_heads, t, d}, 3, at::kDouble), g = randn({b, heads, t, d}, 4, at::kDouble);
    const Outcome blocked = run([&](auto& q_, auto& k_, auto& v_) { return blocked_causal_attention(q_, k_, v_, scale); },
                                q, k, v, g);
    const Outcome reference = run(
        [&](auto& q_, auto& k_, auto& v_) {
          return at::scaled_dot_product_attention(q_, k_, v_, std::nullopt, 0.0, /*is_causal=*/true, scale,
                                                  /*enable_gqa=*/true);
        },
        q, k, v, g);
    EXPECT_LT(gap(blocked.out, reference.out), 1e-12) << "T=" << t;
    EXPECT_LT(gap(blocked.dq, reference.dq), 1e-11) << "T=" << t;
    EXPECT_LT(gap(blocked.dk, reference.dk), 1e-11) << "T=" << t;
    EXPECT_LT(gap(blocked.dv, reference.dv), 1e-11) << "T=" << t;
  }
}

TEST(BlockedAttention, Bfloat16StaysWithinBfloat16OfTheFp32Attention) {
  for (const std::int64_t t : kLengths) {
    const std::int64_t b = 1, heads = 4, kv_heads = 2, d = 64;
    const double scale = 0.125;
    const at::Tensor q = randn({b, heads, t, d}, 5, at::kBFloat16), k = randn({b, kv_heads, t, d}, 6, at::kBFloat16),
                     v = randn({b, kv_heads, t, d}, 7, at::kBFloat16), g = randn({b, heads, t, d}, 8, at::kBFloat16);
    const Outcome blocked = run([&](auto& q_, auto& k_, auto& v_) { return blocked_causal_attention(q_, k_, v_, scale); },
                                q, k, v, g);
    auto fp32 = [](const at::Tensor& x) { return x.detach().to(at::kFloat).requires_grad_(true); };
    const Outcome reference = run(
        [&](auto& q_, auto& k_, auto& v_) {
          return at::scaled_dot_product_attention(q_, k_, v_, std::nullopt, 0.0, /*is_causal=*/true, scale,
                                                  /*enable_gqa=*/true);
        },
        fp32(q), fp32(k), fp32(v), g.to(at::kFloat));
    // Outputs are averages of unit-variance values (|o| < ~3): bf16 keeps 8 bits, and the scores
    // are rounded to bf16 before the softmax, as transformers' eager attention does in bf16.
    EXPECT_LT(gap(blocked.out, reference.out), 0.05) << "T=" << t;
    EXPECT_LT(gap(blocked.dq, reference.dq), 0.1) << "T=" << t;
    EXPECT_LT(gap(blocked.dk, reference.dk), 0.1) << "T=" << t;
    EXPECT_LT(gap(blocked.dv, reference.dv), 0.1) << "T=" << t;
    EXPECT_EQ(blocked.out.scalar_type(), at::kBFloat16);
  }
}

TEST(BlockedAttention, AppliesToBfloat16OnACpuBeyondOneBlock) {
  EXPECT_TRUE(blocked_attention_applies(at::zeros({1, 2, 129, 8}, at::kBFloat16)));
  EXPECT_FALSE(blocked_attention_applies(at::zeros({1, 2, 128, 8}, at::kBFloat16)));
  EXPECT_FALSE(blocked_attention_applies(at::zeros({1, 2, 512, 8}, at::kFloat)));
}

}  // namespace
}  // namespace lft::model
