// Name-and-seed deterministic initialisation, and the per-token loss.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include <ATen/ATen.h>

#include "lft/model/init.h"
#include "lft/model/llama.h"
#include "lft/model/loss.h"
#include "test_util.h"

namespace lft::model {
namespace {

ModelConfig tiny(std::int64_t layers) {
  ModelConfig c = test::tiny_llama(layers);
  c.attention_bias = true;
  return c;
}

TEST(ModelInit, SameSeedSameWeightsWhateverTheModel) {
  LlamaForCausalLM a(tiny(2)), b(tiny(2)), one_layer(tiny(1)), other_seed(tiny(2));
  init_weights(*a, 1234);
  init_weights(*b, 1234);
  init_weights(*one_layer, 1234);
  init_weights(*other_seed, 1235);
  auto pa = a->named_parameters(), pb = b->named_parameters(), p1 = one_layer->named_parameters(),
       ps = other_seed->named_parameters();
  for (const auto& item : pa) {
    const std::string& name = item.key();
    EXPECT_TRUE(at::equal(item.value(), pb[name])) << name;
    if (p1.find(name) != nullptr) {
      EXPECT_TRUE(at::equal(item.value(), p1[name])) << name << " depends on the layer count";
    }
    EXPECT_TRUE(at::equal(item.value(), init_parameter(name, item.value().sizes(), 1234))) << name;
    const bool constant = name.find("norm.weight") != std::string::npos ||
                          name.find(".bias") != std::string::npos;
    EXPECT_EQ(at::equal(item.value(), ps[name]), constant) << name;
  }
  EXPECT_TRUE(at::equal(pa["model.layers.0.mlp.up_proj.weight"],
                        p1["model.layers.0.mlp.up_proj.weight"]));
  // Two different names never share values.
  EXPECT_FALSE(at::equal(pa["model.layers.0.mlp.up_proj.weight"],
                         pa["model.layers.0.mlp.gate_proj.weight"]));
  EXPECT_FALSE(at::equal(pa["model.layers.0.mlp.up_proj.weight"],
                         pa["model.layers.1.mlp.up_proj.weight"]));
}

TEST(ModelInit, Distributions) {
  LlamaForCausalLM m(tiny(2));
  init_weights(*m, 7);
  auto p = m->named_parameters();
  EXPECT_TRUE(at::equal(p["model.norm.weight"], at::ones({32})));
  EXPECT_TRUE(at::equal(p["model.layers.1.post_attention_layernorm.weight"], at::ones({32})));
  EXPECT_TRUE(at::equal(p["model.layers.0.self_attn.q_proj.bias"], at::zeros({32})));
  const at::Tensor e = p["model.embed_tokens.weight"];
  EXPECT_NEAR(e.mean().item<double>(), 0.0, 0.003);
  EXPECT_NEAR(e.std().item<double>(), kInitStd, 0.002);
  const at::Tensor w = p["model.layers.1.mlp.down_proj.weight"];
  EXPECT_NEAR(w.std().item<double>(), kInitStd, 0.002);
  // bf16 models get the same values, rounded.
  LlamaForCausalLM half(tiny(2), at::TensorOptions().dtype(at::kBFloat16));
  init_weights(*half, 7);
  EXPECT_TRUE(at::equal(half->named_parameters()["model.embed_tokens.weight"],
                        e.to(at::kBFloat16)));
  EXPECT_NE(parameter_seed("a", 1), parameter_seed("b", 1));
  EXPECT_NE(parameter_seed("a", 1), parameter_seed("a", 2));
}

TEST(ModelLoss, TokenLossesAreShiftedCrossEntropyWithPadMask) {
  const at::Tensor logits = at::randn({2, 5, 11}, at::TensorOptions().dtype(at::kDouble))
                                .to(at::kFloat).requires_grad_(true);
  const at::Tensor ids = at::tensor({3, 4, 5, 6, 7, 8, 9, 10, 0, 0}, at::kLong).view({2, 5});
  const at::Tensor l = token_losses(logits, ids, /*ignore_id=*/0);
  ASSERT_EQ(l.sizes(), (std::vector<std::int64_t>{2, 4}));
  EXPECT_EQ(l.scalar_type(), at::kFloat);
  const at::Tensor logp = at::log_softmax(logits.to(at::kDouble), -1);
  for (int b = 0; b < 2; ++b) {
    for (int t = 0; t < 4; ++t) {
      const std::int64_t target = ids[b][t + 1].item<std::int64_t>();
      const double expect = target == 0 ? 0.0 : -logp[b][t][target].item<double>();
      EXPECT_NEAR(l[b][t].item<double>(), expect, 1e-5) << b << "," << t;
    }
  }
  EXPECT_EQ(l[1][2].item<double>(), 0.0);
  EXPECT_EQ(l[1][3].item<double>(), 0.0);
  const at::Tensor mask = target_mask(ids, 0);
  EXPECT_EQ(mask.scalar_type(), at::kBool);
  EXPECT_EQ(mask.sum().item<std::int64_t>(), 6);
  EXPECT_FALSE(mask[1][2].item<bool>());
  // Differentiable; the last position and padded targets get no gradient.
  l.sum().backward();
  EXPECT_EQ(logits.grad().select(1, 4).abs().sum().item<double>(), 0.0);
  EXPECT_EQ(logits.grad()[1][2].abs().sum().item<double>(), 0.0);
  EXPECT_GT(logits.grad()[1][1].abs().sum().item<double>(), 0.0);
}

TEST(ModelLoss, Bf16LogitsAreUpcast) {
  const at::Tensor logits = (at::randn({1, 4, 300}) * 8).to(at::kBFloat16);
  const at::Tensor ids = at::tensor({5, 250, 7, 299}, at::kLong).view({1, 4});
  const at::Tensor l = token_losses(logits, ids, -100);
  EXPECT_EQ(l.scalar_type(), at::kFloat);
  const at::Tensor ref = token_losses(logits.to(at::kFloat), ids, -100);
  EXPECT_TRUE(at::equal(l, ref));
  EXPECT_EQ(token_losses(logits.narrow(1, 0, 1), ids.narrow(1, 0, 1), 0).numel(), 0);
}

}  // namespace
}  // namespace lft::model
