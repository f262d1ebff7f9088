// The main proof that the C++ Llama is the Hugging Face model: tiny models made by transformers
// (tools/make-model-fixture.py: Llama untied, Llama tied, Qwen2 with q/k/v biases, Mistral with
// a sliding window of 4 over 9 tokens, Qwen3 with per-head q/k norms and an explicit head_dim,
// Gemma2 with every hook of its family: scaled embeddings, (1 + w) norms, four norms a layer,
// GELU-tanh, query_pre_attn_scalar, soft-capped scores and logits, alternating windows, tied head;
// Gemma, a spec on Llama's model with Gemma's hooks),
// built through the family registry (model::create_causal_lm) and loaded by name from their model.safetensors, must
// reproduce transformers' logits and the gradient of the summed next-token loss for every
// parameter. No Python or network at test time.
//
// Tolerances (float32 on the CPU): logits max |diff| <= 1e-5; each gradient element within
// 1e-5 absolute or 1e-4 relative to the largest |element| of that gradient.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <string>

#include <ATen/ATen.h>

#include "fixture_util.h"
#include "lft/model/families.h"
#include "lft/model/hf_checkpoint.h"
#include "lft/model/llama.h"
#include "lft/model/loss.h"
#include "lft/model/model_config.h"
#include "lft/model/safetensors.h"

namespace lft::model {
namespace {

class ModelVsTransformers : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(ModelVsTransformers, LogitsAndGradientsMatch) {
  const auto& [name, checkpointing] = GetParam();
  const std::string dir = fixture_dir(name);
  const ModelConfig config = ModelConfig::from_hf_folder(dir);
  if (name == "mistral-tiny") {
    // The window (4) is shorter than the fixture's 9 tokens, in every layer, so it matters.
    EXPECT_EQ(config.model_type, "mistral");
    EXPECT_EQ(config.sliding_window, 4);
    EXPECT_TRUE(config.uses_sliding_window(0));
    EXPECT_TRUE(config.uses_sliding_window(config.num_hidden_layers - 1));
  }

  if (name == "qwen3-tiny") {
    EXPECT_EQ(config.model_type, "qwen3");
    EXPECT_TRUE(config.qk_norm);
    EXPECT_EQ(config.head_dim(), 16);  // not hidden_size / heads = 8
  }
  if (name == "gemma2-tiny") {
    EXPECT_EQ(config.model_type, "gemma2");
    EXPECT_TRUE(config.uses_sliding_window(0));
    EXPECT_FALSE(config.uses_sliding_window(1));
    EXPECT_TRUE(config.uses_sliding_window(2));
    EXPECT_EQ(config.attn_logit_softcapping, 2.0);
    EXPECT_EQ(config.final_logit_softcapping, 3.0);
    EXPECT_TRUE(config.unit_offset_norms);
    EXPECT_TRUE(config.tie_word_embeddings);
  }
  const std::shared_ptr<CausalLM> model = create_causal_lm(config);
  EXPECT_EQ(config.num_parameters(), [&] {
    std::int64_t n = 0;
    for (const auto& p : model->parameters()) n += p.numel();
    return n;
  }()) << "ModelConfig::num_parameters disagrees with the model";
  // Every HF tensor matches a C++ parameter of the same shape, and vice versa.
  const auto weights = read_safetensors(dir + "/model.safetensors");
  auto params = model->named_parameters();
  expect_same_names_and_shapes(weights, *model);
  EXPECT_EQ(weights.count("lm_head.weight"), config.tie_word_embeddings ? 0u : 1u);
  load_hf_checkpoint(*model, dir);
  for (const auto& [n, t] : weights) EXPECT_TRUE(at::equal(params[n], t)) << n;

  std::map<std::string, std::string> meta;
  const auto io = read_safetensors(dir + "/io.safetensors", &meta);
  const std::int64_t pad = std::stoll(meta.at("pad_id"));
  const at::Tensor ids = io.at("input_ids");

  model->set_gradient_checkpointing(checkpointing);
  model->zero_grad();
  const at::Tensor logits = model->forward(ids);
  const double logits_diff = max_abs_diff(logits, io.at("logits"));
  EXPECT_LE(logits_diff, 1e-5);

  const at::Tensor loss = token_losses(logits, ids, pad).sum();
  const double loss_diff = std::abs(loss.item<double>() - io.at("loss").item<double>());
  EXPECT_LE(loss_diff, 1e-4);
  loss.backward();

  double worst_abs = 0, worst_rel = 0;
  std::string worst_name;
  std::size_t compared = 0;
  for (const auto& p : params) {
    const std::string key = "grad." + p.key();
    ASSERT_EQ(io.count(key), 1u) << key;
    const at::Tensor& expect = io.at(key);
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    const double diff = max_abs_diff(p.value().grad(), expect);
    const double scale = std::max(expect.abs().max().item<double>(), 1e-30);
    EXPECT_TRUE(diff <= 1e-5 || diff <= 1e-4 * scale)
        << p.key() << ": max |diff| " << diff << ", max |grad| " << scale;
    if (diff > worst_abs) worst_abs = diff, worst_name = p.key();
    worst_rel = std::max(worst_rel, diff / scale);
    ++compared;
  }
  EXPECT_EQ(compared, weights.size());
  std::printf("[%s%s] logits max|diff| %.3g, loss |diff| %.3g, gradients (%zu) max|diff| %.3g "
              "(%s), max relative %.3g\n",
              name.c_str(), checkpointing ? ", checkpointing" : "", logits_diff, loss_diff,
              compared, worst_abs, worst_name.c_str(), worst_rel);
}

INSTANTIATE_TEST_SUITE_P(ModelFixtures, ModelVsTransformers,
                         ::testing::Combine(::testing::Values("llama-tiny", "llama-tiny-tied",
                                                              "qwen2-tiny", "mistral-tiny", "qwen3-tiny",
                                                              "gemma2-tiny", "gemma-tiny"),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           std::string n = std::get<0>(info.param);
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n + (std::get<1>(info.param) ? "_checkpointing" : "");
                         });

TEST(ModelVsTransformersLoad, StrictNameChecks) {
  // A tied checkpoint loaded into an untied model lacks lm_head.weight.
  ModelConfig c = ModelConfig::from_hf_folder(fixture_dir("llama-tiny-tied"));
  c.tie_word_embeddings = false;
  LlamaForCausalLM untied(c);
  try {
    load_hf_checkpoint(*untied, fixture_dir("llama-tiny-tied"));
    ADD_FAILURE() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("has no tensor 'lm_head.weight'"), std::string::npos)
        << e.what();
  }
  // The untied checkpoint into a tied model: lm_head differs from the embedding.
  ModelConfig t = ModelConfig::from_hf_folder(fixture_dir("llama-tiny"));
  t.tie_word_embeddings = true;
  LlamaForCausalLM tied(t);
  try {
    load_hf_checkpoint(*tied, fixture_dir("llama-tiny"));
    ADD_FAILURE() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("'lm_head.weight' differs from"), std::string::npos)
        << e.what();
  }
  // Wrong shapes (another layer count is fine by name, but not the other way round).
  ModelConfig more = ModelConfig::from_hf_folder(fixture_dir("llama-tiny"));
  more.num_hidden_layers = 3;
  LlamaForCausalLM deeper(more);
  EXPECT_THROW(load_hf_checkpoint(*deeper, fixture_dir("llama-tiny")), std::exception);
  EXPECT_THROW(hf_weight_files("/nonexistent"), std::exception);
}

}  // namespace
}  // namespace lft::model
