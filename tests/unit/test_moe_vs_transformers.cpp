// lftrain's mixtures of experts are transformers': tiny Qwen3-MoE (renormalised top-2 of 4),
// Qwen2-MoE (a gated shared expert; layer 1 dense) and Mixtral (Mixtral's names, a sliding
// window) made by transformers 5 (tools/make-moe-fixture.py), loaded by name from the Hub layout,
// reproduce its logits, the summed next-token loss, the auxiliary load-balancing loss over the
// unpadded tokens, and every parameter's gradient of loss + router_aux_loss_coef * aux, with and
// without activation checkpointing; transformers 5's fused layout loads to the same parameters.
// Tolerances as test_model_vs_transformers.cpp (fp32): logits 1e-5, gradients 1e-5 absolute or
// 1e-4 of the largest |element|; the auxiliary loss 1e-6 relative.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include <ATen/ATen.h>

#include "fixture_util.h"
#include "lft/config/config.h"
#include "lft/model/families.h"
#include "lft/model/hf_checkpoint.h"
#include "lft/model/model_config.h"
#include "lft/model/safetensors.h"

namespace lft::model {
namespace {

std::shared_ptr<CausalLM> loaded(const ModelConfig& config, const std::string& dir) {
  std::shared_ptr<CausalLM> model = create_causal_lm(config);
  load_hf_checkpoint(*model, dir);
  return model;
}

class MoeVsTransformers : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(MoeVsTransformers, LogitsAuxLossAndGradientsMatch) {
  const auto& [name, checkpointing] = GetParam();
  const std::string dir = fixture_dir(name);
  const ModelConfig config = ModelConfig::from_hf_folder(dir);
  ASSERT_TRUE(config.moe.any());
  EXPECT_EQ(config.moe.num_experts, 4);
  EXPECT_EQ(config.moe.experts_per_token, 2);
  EXPECT_TRUE(config.moe.aux_loss());
  if (name == "qwen2-moe-tiny") {
    EXPECT_TRUE(config.moe.routes(0));
    EXPECT_FALSE(config.moe.routes(1));  // mlp_only_layers
    EXPECT_EQ(config.moe.shared_expert_intermediate_size, 20);
  }
  const std::shared_ptr<CausalLM> model = create_causal_lm(config);
  std::int64_t count = 0;
  for (const auto& p : model->parameters()) count += p.numel();
  EXPECT_EQ(config.num_parameters(), count) << "ModelConfig::num_parameters disagrees with the model";
  EXPECT_LT(config.num_active_parameters(), count);

  // The Hub layout: every tensor a parameter of the same name and shape, and back.
  expect_same_names_and_shapes(read_safetensors(dir + "/model.safetensors"), *model);
  auto params = model->named_parameters();
  load_hf_checkpoint(*model, dir);

  std::map<std::string, std::string> meta;
  const auto io = read_safetensors(dir + "/io.safetensors", &meta);
  const std::int64_t pad = std::stoll(meta.at("pad_id"));
  const at::Tensor ids = io.at("input_ids");
  {
    at::NoGradGuard no_grad;
    EXPECT_LE(max_abs_diff(model->forward(ids), io.at("logits")), 1e-5);
  }

  model->set_gradient_checkpointing(checkpointing);
  model->set_router_aux_scale(config.moe.router_aux_loss_coef);
  model->zero_grad();
  const at::Tensor targets = ids.narrow(1, 1, ids.size(1) - 1);
  const at::Tensor loss = (model->token_losses(ids, {}, ids != pad) * (targets != pad)).sum();
  EXPECT_LE(std::abs(loss.item<double>() - io.at("loss").item<double>()), 1e-4);
  const RoutingTotals routing = model->take_routing_totals();
  ASSERT_EQ(routing.forwards, 1);
  const double aux = io.at("aux_loss").item<double>();
  EXPECT_NEAR(routing.aux_loss_sum, aux, 1e-6 * aux);
  // Every unpadded token went to k experts in each MoE layer.
  const std::int64_t tokens = (ids != pad).sum().item<std::int64_t>();
  EXPECT_EQ(routing.expert_rows.sum(1).eq(static_cast<double>(2 * tokens)).all().item<bool>(), true);
  loss.backward();

  double worst = 0;
  std::string worst_name;
  for (const auto& p : params) {
    const at::Tensor& expect = io.at("grad." + p.key());
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    const double diff = max_abs_diff(p.value().grad(), expect);
    const double scale = std::max(expect.abs().max().item<double>(), 1e-30);
    EXPECT_TRUE(diff <= 1e-5 || diff <= 1e-4 * scale) << p.key() << ": max |diff| " << diff << ", max |grad| " << scale;
    if (diff > worst) worst = diff, worst_name = p.key();
  }
  // The router's gradient holds the auxiliary loss's share: without it, it differs.
  std::printf("[%s%s] aux %.9g (transformers %.9g), gradients max|diff| %.3g (%s)\n", name.c_str(),
              checkpointing ? ", checkpointing" : "", routing.aux_loss_sum, aux, worst, worst_name.c_str());
}

INSTANTIATE_TEST_SUITE_P(MoeFixtures, MoeVsTransformers,
                         ::testing::Combine(::testing::Values("qwen3-moe-tiny", "qwen2-moe-tiny", "mixtral-tiny"),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           std::string n = std::get<0>(info.param);
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n + (std::get<1>(info.param) ? "_checkpointing" : "");
                         });

// The aux loss's gradient matters: with scale 0 the router's gradient differs from transformers'.
TEST(MoeVsTransformers, AuxLossGradientReachesTheRouter) {
  const std::string dir = fixture_dir("qwen3-moe-tiny");
  const ModelConfig config = ModelConfig::from_hf_folder(dir);
  const auto io = read_safetensors(dir + "/io.safetensors");
  const at::Tensor ids = io.at("input_ids");
  const at::Tensor targets = ids.narrow(1, 1, ids.size(1) - 1);
  auto router_grad = [&](double scale) {
    const std::shared_ptr<CausalLM> model = loaded(config, dir);
    model->set_router_aux_scale(scale);
    (model->token_losses(ids, {}, ids != 0) * (targets != 0)).sum().backward();
    return model->named_parameters()["model.layers.0.mlp.gate.weight"].grad().clone();
  };
  const at::Tensor with = router_grad(config.moe.router_aux_loss_coef), without = router_grad(0.0);
  EXPECT_LE(max_abs_diff(with, io.at("grad.model.layers.0.mlp.gate.weight")), 1e-5);
  EXPECT_GT(max_abs_diff(with, without), 1e-3);
}

// transformers 5's fused experts (and Mixtral's router under mlp.) load to the Hub layout's values.
TEST(MoeVsTransformers, FusedLayoutLoadsTheSameWeights) {
  for (const std::string name : {"qwen3-moe-tiny", "qwen2-moe-tiny", "mixtral-tiny"}) {
    const std::string dir = fixture_dir(name);
    char tmpl[] = "/tmp/lft_moe_fused_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    const std::string folder = tmpl;
    for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
             {"config.json", "config.json"}, {"fused.safetensors", "model.safetensors"}}) {
      std::ifstream in(dir + "/" + from, std::ios::binary);
      std::ofstream out(folder + "/" + to, std::ios::binary);
      out << in.rdbuf();
    }
    const ModelConfig config = ModelConfig::from_hf_folder(dir);
    const auto hub = loaded(config, dir), fused = loaded(config, folder);
    const auto a = hub->named_parameters(), b = fused->named_parameters();
    for (const auto& p : a) EXPECT_TRUE(at::equal(p.value(), b[p.key()])) << name << ": " << p.key();
    std::remove((folder + "/config.json").c_str());
    std::remove((folder + "/model.safetensors").c_str());
    rmdir(folder.c_str());
  }
}

}  // namespace
}  // namespace lft::model
