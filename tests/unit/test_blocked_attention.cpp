// Blocked causal attention (model/blocked_attention.h) against LibTorch's scaled_dot_product_attention:
// in float64 the same function to rounding (so the blocks, the diagonal masks and the grouping of
// query heads are right), output and every input gradient; in bf16 within what bf16 scores allow,
// against the same attention computed in fp32; the fused softmax (fused_kernels "attention")
// against the formula in bf16, and in fp32 against the float64 attention.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <vector>

#include "lft/model/blocked_attention.h"
#include "lft/model/fused.h"

namespace lft::model {
namespace {

at::Tensor randn(std::vector<std::int64_t> shape, std::uint64_t seed, at::ScalarType dtype) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn(shape, gen, at::TensorOptions().dtype(at::kFloat)).to(dtype).requires_grad_(true);
}

struct Outcome {
  at::Tensor out, dq, dk, dv;
};

// The output of blocked_causal_attention (or, `reference`, of causal scaled_dot_product_attention)
// and the gradients of q, k and v under output gradient g.
Outcome attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g, double scale,
               bool reference) {
  const at::Tensor out = reference ? at::scaled_dot_product_attention(q, k, v, std::nullopt, 0.0, /*is_causal=*/true,
                                                                      scale, /*enable_gqa=*/true)
                                   : blocked_causal_attention(q, k, v, scale);
  const auto grads = torch::autograd::grad({out}, {q, k, v}, {g});
  return {out, grads[0], grads[1], grads[2]};
}

double gap(const at::Tensor& a, const at::Tensor& b) { return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>(); }

void expect_close(const Outcome& a, const Outcome& b, double out_bound, double grad_bound, std::int64_t t) {
  EXPECT_LT(gap(a.out, b.out), out_bound) << "T=" << t;
  EXPECT_LT(gap(a.dq, b.dq), grad_bound) << "T=" << t;
  EXPECT_LT(gap(a.dk, b.dk), grad_bound) << "T=" << t;
  EXPECT_LT(gap(a.dv, b.dv), grad_bound) << "T=" << t;
}

// Sequence lengths around the block (128 rows): one block, a whole number of them, a tail.
const std::vector<std::int64_t> kLengths{100, 256, 300};

TEST(BlockedAttention, Float64EqualsScaledDotProductAttentionWithGroupedHeads) {
  for (const std::int64_t t : kLengths) {
    const std::int64_t b = 2, heads = 6, kv_heads = 2, d = 16;
    const at::Tensor q = randn({b, heads, t, d}, 1, at::kDouble), k = randn({b, kv_heads, t, d}, 2, at::kDouble),
                     v = randn({b, kv_heads, t, d}, 3, at::kDouble), g = randn({b, heads, t, d}, 4, at::kDouble);
    expect_close(attend(q, k, v, g, 0.3, false), attend(q, k, v, g, 0.3, true), 1e-12, 1e-11, t);
  }
}

TEST(BlockedAttention, Bfloat16StaysWithinBfloat16OfTheFp32Attention) {
  for (const std::int64_t t : kLengths) {
    const std::int64_t b = 1, heads = 4, kv_heads = 2, d = 64;
    const at::Tensor q = randn({b, heads, t, d}, 5, at::kBFloat16), k = randn({b, kv_heads, t, d}, 6, at::kBFloat16),
                     v = randn({b, kv_heads, t, d}, 7, at::kBFloat16), g = randn({b, heads, t, d}, 8, at::kBFloat16);
    auto fp32 = [](const at::Tensor& x) { return x.detach().to(at::kFloat).requires_grad_(true); };
    const Outcome blocked = attend(q, k, v, g, 0.125, false);
    // Outputs are averages of unit-variance values (|o| < ~3): bf16 keeps 8 bits, and the scores
    // are rounded to bf16 before the softmax, as transformers' eager attention does in bf16.
    expect_close(blocked, attend(fp32(q), fp32(k), fp32(v), g.to(at::kFloat), 0.125, true), 0.05, 0.1, t);
    EXPECT_EQ(blocked.out.scalar_type(), at::kBFloat16);
  }
}

// The fused causal softmax (one kernel pass for scale, mask, softmax and casts; k's and v's
// gradients summed over the blocks in fp32) against the formula's ATen operations, both bf16.
TEST(BlockedAttention, FusedSoftmaxEqualsTheFormulaWithinBfloat16) {
  if (!fused_kernels_supported()) GTEST_SKIP() << "this CPU has no AVX2/FMA: the fused softmax never runs here";
  for (const std::int64_t t : kLengths) {
    const std::int64_t b = 2, heads = 4, kv_heads = 2, d = 32;
    const at::Tensor q = randn({b, heads, t, d}, 13, at::kBFloat16), k = randn({b, kv_heads, t, d}, 14, at::kBFloat16),
                     v = randn({b, kv_heads, t, d}, 15, at::kBFloat16), g = randn({b, heads, t, d}, 16, at::kBFloat16);
    const Outcome formula = attend(q, k, v, g, 0.17, false);
    auto fp32 = [](const at::Tensor& x) { return x.detach().to(at::kFloat).requires_grad_(true); };
    const Outcome exact = attend(fp32(q), fp32(k), fp32(v), g.to(at::kFloat), 0.17, true);
    for (const char* build : {"avx2", "auto"}) {  // the AVX2 build, and AVX-512's where the CPU has it
      SCOPED_TRACE(build);
      set_kernel_isa(build);
      set_fused_kernels(kFusedAttention);
      const Outcome fused = attend(q, k, v, g, 0.17, false);
      set_fused_kernels(0);
      EXPECT_EQ(fused.out.scalar_type(), at::kBFloat16);
      EXPECT_EQ(fused.dk.scalar_type(), at::kBFloat16);
      // One bf16 rounding apart (the probabilities are saved in bf16, the sums run in another order).
      expect_close(fused, formula, 0.02, 0.05, t);
      // and as close to the fp32 attention as the formula is
      expect_close(fused, exact, 0.05, 0.1, t);
    }
  }
}

// In fp32 the fused softmax's sums and exp (Sleef's 1 ulp) against the attention in float64:
// as close as LibTorch's own fp32 attention is (the probabilities are kept in fp32).
TEST(BlockedAttention, FusedSoftmaxInFp32IsAsExactAsLibTorchsFp32Attention) {
  if (!fused_kernels_supported()) GTEST_SKIP() << "this CPU has no AVX2/FMA: the fused softmax never runs here";
  for (const std::int64_t t : kLengths) {
    const std::int64_t b = 2, heads = 4, kv_heads = 2, d = 32;
    const at::Tensor q = randn({b, heads, t, d}, 17, at::kFloat), k = randn({b, kv_heads, t, d}, 18, at::kFloat),
                     v = randn({b, kv_heads, t, d}, 19, at::kFloat), g = randn({b, heads, t, d}, 20, at::kFloat);
    auto fp64 = [](const at::Tensor& x) { return x.detach().to(at::kDouble).requires_grad_(true); };
    const Outcome exact = attend(fp64(q), fp64(k), fp64(v), g.to(at::kDouble), 0.17, true);
    const Outcome libtorch = attend(q, k, v, g, 0.17, true);
    const double out_bound = 2 * std::max(gap(libtorch.out, exact.out), 1e-7);
    const double grad_bound = 2 * std::max({gap(libtorch.dq, exact.dq), gap(libtorch.dk, exact.dk),
                                            gap(libtorch.dv, exact.dv), 1e-7});
    for (const char* build : {"avx2", "auto"}) {
      SCOPED_TRACE(build);
      set_kernel_isa(build);
      set_fused_kernels(kFusedAttention);
      const bool applies = blocked_attention_applies(q);
      const Outcome fused = attend(q, k, v, g, 0.17, false);
      set_fused_kernels(0);
      EXPECT_EQ(applies, t > 128);
      EXPECT_EQ(fused.dk.scalar_type(), at::kFloat);
      expect_close(fused, exact, out_bound, grad_bound, t);
    }
  }
}

TEST(BlockedAttention, AppliesBeyondOneBlockUpToALengthInBfloat16AndInFp32WithTheFusedSoftmax) {
  EXPECT_TRUE(blocked_attention_applies(at::zeros({1, 2, 129, 8}, at::kBFloat16)));
  EXPECT_FALSE(blocked_attention_applies(at::zeros({1, 2, 128, 8}, at::kBFloat16)));
  EXPECT_FALSE(blocked_attention_applies(at::zeros({1, 2, 512, 8}, at::kFloat)));
  EXPECT_TRUE(blocked_attention_serves(at::kFloat, 512, true));
  EXPECT_FALSE(blocked_attention_serves(at::kFloat, 128, true));
  EXPECT_FALSE(blocked_attention_serves(at::kHalf, 512, true));
  EXPECT_FALSE(blocked_attention_serves(at::kDouble, 512, true));
  // Beyond the length where its kept probabilities outgrow a layer's other activations: LibTorch's.
  EXPECT_TRUE(blocked_attention_serves(at::kFloat, 1024, true));
  EXPECT_FALSE(blocked_attention_serves(at::kFloat, 1025, true));
  EXPECT_TRUE(blocked_attention_serves(at::kBFloat16, 2048, true));
  EXPECT_FALSE(blocked_attention_serves(at::kBFloat16, 4096, true));
  EXPECT_FALSE(blocked_attention_applies(at::zeros({1, 2, 4096, 8}, at::kBFloat16)));
  // Per token of 300 (blocks of 128, 128, 44 rows over 128, 256, 300 keys), per head, fp32.
  EXPECT_DOUBLE_EQ(blocked_attention_saved_bytes_per_token(300, at::kFloat, true),
                   (128.0 * 128 + 128.0 * 256 + 44.0 * 300) / 300 * 4);
  // bf16 without the fused softmax: autograd's fp32 softmax and its bf16 copy.
  EXPECT_DOUBLE_EQ(blocked_attention_saved_bytes_per_token(300, at::kBFloat16, false),
                   (128.0 * 128 + 128.0 * 256 + 44.0 * 300) / 300 * 6);
  EXPECT_TRUE(blocked_attention_serves(at::kBFloat16, 640, false));
  EXPECT_FALSE(blocked_attention_serves(at::kBFloat16, 768, false));
}

// fp32 query and key (Qwen3's, out of their fp32 norms and rotary) under CPU autocast: attention in
// bf16, as scaled_dot_product_attention computes it there, and fp32 gradients back.
TEST(BlockedAttention, Fp32InputsUnderBfloat16AutocastAttendInBfloat16) {
  const std::int64_t t = 300;
  const at::Tensor q = randn({1, 4, t, 64}, 9, at::kFloat), k = randn({1, 2, t, 64}, 10, at::kFloat),
                   v = randn({1, 2, t, 64}, 11, at::kBFloat16), g = randn({1, 4, t, 64}, 12, at::kBFloat16);
  auto bf16 = [](const at::Tensor& x) { return x.detach().to(at::kBFloat16).requires_grad_(true); };
  const Outcome cast_first = attend(bf16(q), bf16(k), v, g, 0.125, false);
  EXPECT_FALSE(blocked_attention_applies(q));
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  at::autocast::set_autocast_enabled(at::kCPU, true);
  const bool applies = blocked_attention_applies(q);
  const Outcome under_autocast = attend(q, k, v, g, 0.125, false);
  at::autocast::set_autocast_enabled(at::kCPU, false);
  EXPECT_TRUE(applies);
  EXPECT_TRUE(at::equal(under_autocast.out, cast_first.out));
  EXPECT_EQ(under_autocast.dq.scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(under_autocast.dq, cast_first.dq.to(at::kFloat)));
  EXPECT_TRUE(at::equal(under_autocast.dk, cast_first.dk.to(at::kFloat)));
}

}  // namespace
}  // namespace lft::model
