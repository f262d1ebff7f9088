// Freeze and LoRA fine-tuning on one process: which parameters train (LlamaFactory's freeze rules,
// PEFT's target matching), the adapters' arithmetic, initialisation, tensor-parallel roles and
// dropout masks.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "lft/config/config.h"
#include "lft/model/adapter_weights.h"
#include "lft/model/families.h"
#include "lft/model/finetuning.h"
#include "lft/model/init.h"
#include "lft/model/layers.h"
#include "lft/model/safetensors.h"
#include "test_util.h"

namespace lft::model {
namespace {

ModelConfig tiny(std::int64_t layers = 4) { return test::tiny_llama(layers); }

std::set<std::string> trained(const CausalLM& m) {
  std::set<std::string> out;
  for (const auto& item : m.named_parameters())
    if (item.value().requires_grad()) out.insert(item.key());
  return out;
}

std::shared_ptr<CausalLM> build(const FinetuningSpec& spec) {
  std::shared_ptr<CausalLM> model = create_causal_lm(tiny(), {});
  apply_finetuning(*model, spec);
  return model;
}

std::string error_of(const FinetuningSpec& spec, std::string* key = nullptr) {
  try {
    build(spec);
  } catch (const FinetuningError& e) {
    if (key) *key = e.key;
    return e.what();
  }
  return "";
}

TEST(Lora, AdaptersBesideEveryLinearOfTheLayersByDefault) {
  FinetuningSpec spec;
  spec.type = "lora";
  spec.lora_rank = 4;
  const auto m = build(spec);
  const std::set<std::string> t = trained(*m);
  EXPECT_EQ(t.size(), 4u * 7 * 2);  // 4 layers x 7 linears x (A, B)
  EXPECT_TRUE(t.count("model.layers.3.mlp.down_proj.lora_A.weight"));
  EXPECT_EQ(m->named_parameters()["model.layers.0.self_attn.k_proj.lora_A.weight"].sizes(), (at::IntArrayRef{4, 32}));
  EXPECT_EQ(m->named_parameters()["model.layers.0.self_attn.k_proj.lora_B.weight"].sizes(), (at::IntArrayRef{16, 4}));
  EXPECT_FALSE(t.count("lm_head.weight"));
  EXPECT_EQ(lora_target_names(*m, spec), (std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                                   "up_proj", "down_proj"}));
  spec.lora_target = {"q_proj", "v_proj"};
  spec.additional_target = {"lm_head", "norm"};
  const std::set<std::string> subset = trained(*build(spec));
  // PEFT's modules_to_save matching: "norm" ends model.norm and every layer's two norms.
  EXPECT_EQ(subset.size(), 4u * 2 * 2 + 2 + 4 * 2);
  EXPECT_TRUE(subset.count("lm_head.weight"));
  EXPECT_TRUE(subset.count("model.norm.weight"));
  EXPECT_TRUE(subset.count("model.layers.0.input_layernorm.weight"));
  EXPECT_FALSE(subset.count("model.layers.0.self_attn.q_proj.weight"));
}

TEST(Lora, UnknownModulesNameTheKey) {
  FinetuningSpec spec;
  spec.type = "lora";
  spec.lora_target = {"q_proj", "qkv_proj"};
  std::string key;
  EXPECT_CONTAINS(error_of(spec, &key), "lora_target names 'qkv_proj', which is no linear of the decoder layers");
  EXPECT_EQ(key, "lora_target");
  EXPECT_CONTAINS(error_of(spec), "down_proj, gate_proj");
  spec.lora_target = {"all"};
  spec.additional_target = {"score"};
  EXPECT_CONTAINS(error_of(spec, &key), "additional_target names 'score', which is no module of the model");
  EXPECT_EQ(key, "additional_target");
}

// An adapter made for another base (intermediate_size 80, not 40): refused as PEFT refuses it,
// naming both shapes, before any rows are read (rows were cut to the model's shape before).
TEST(Lora, AdapterForAnotherBaseIsASizeMismatch) {
  FinetuningSpec spec;
  spec.type = "lora";
  spec.lora_rank = 4;
  spec.lora_target = {"up_proj"};
  const auto m = build(spec);
  test::TempDir dir;
  dir.write("adapter_config.json", R"({"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["up_proj"]})");
  auto write_adapter = [&](std::int64_t ffn) {
    std::map<std::string, at::Tensor> tensors;
    for (int l = 0; l < 4; ++l) {
      const std::string prefix = std::string(kPeftPrefix) + "model.layers." + std::to_string(l) + ".mlp.up_proj.";
      tensors[prefix + "lora_A.weight"] = at::zeros({4, 32});
      tensors[prefix + "lora_B.weight"] = at::zeros({ffn, 4});
    }
    write_safetensors(dir.path("adapter_model.safetensors"), tensors);
  };
  write_adapter(40);
  EXPECT_NO_THROW(PeftAdapter(dir.dir()).check_shapes(*m));
  write_adapter(80);
  const std::string why = test::message_of<config::ConfigError>([&] { PeftAdapter(dir.dir()).check_shapes(*m); });
  EXPECT_CONTAINS(why, "adapter_model.safetensors: tensor 'base_model.model.model.layers.0.mlp.up_proj.lora_B.weight' "
                       "has shape [80, 4], the model's model.layers.0.mlp.up_proj.lora_B.weight [40, 4]: size mismatch");
  // Rows beyond the file's tensor are refused too (a caller that skipped check_shapes).
  at::Tensor rows = at::empty({40, 4});
  write_adapter(20);
  EXPECT_THROW(PeftAdapter(dir.dir()).read_rows("model.layers.0.mlp.up_proj.lora_B.weight", 0, 40, rows), config::ConfigError);
}

TEST(Lora, ForwardIsTheBasePlusScaledLowRankUpdate) {
  at::manual_seed(0);
  Linear base(6, 5, true);
  base->weight.data().normal_();
  base->bias.data().normal_();
  const at::Tensor x = at::randn({2, 3, 6});
  const at::Tensor before = base(x);
  base->add_lora(2, 1.5, 0.0, 1);
  EXPECT_TRUE(at::equal(base(x), before)) << "B starts at zero in PEFT; here it is filled with zeros too";
  base->lora_A->weight.data().normal_();
  base->lora_B->weight.data().normal_();
  const at::Tensor expected = before + 1.5 * at::matmul(at::matmul(x, base->lora_A->weight.t()), base->lora_B->weight.t());
  EXPECT_TRUE(at::allclose(base(x), expected, 1e-5, 1e-6));
}

// DoRA (the paper's eq. 5 with the norm detached, section 4.3): the output is m/||W + sBA||
// (per output row) times the LoRA output; the magnitude trains, the norm passes no gradient.
TEST(Dora, ForwardRescalesEachRowToItsMagnitude) {
  at::manual_seed(2);
  Linear l(6, 5, true);
  l->weight.data().normal_();
  l->bias.data().normal_();
  l->add_lora(2, 1.5, 0.0, 1, {}, /*dora=*/true);
  l->lora_A->weight.data().normal_();
  l->lora_B->weight.data().normal_();
  l->lora_magnitude_vector.data().uniform_(0.5, 2.0);
  for (const at::Tensor& p : {l->lora_A->weight, l->lora_B->weight, l->lora_magnitude_vector}) p.requires_grad_(true);
  const at::Tensor x = at::randn({3, 6});
  const at::Tensor adapted = l->weight + 1.5 * at::matmul(l->lora_B->weight, l->lora_A->weight);
  const at::Tensor norm = at::linalg_vector_norm(adapted, 2, {1}).detach();
  const at::Tensor expected = at::linear(x, adapted * (l->lora_magnitude_vector / norm).view({-1, 1})) + l->bias;
  const at::Tensor y = l(x);
  EXPECT_TRUE(at::allclose(y, expected, 1e-5, 1e-6));
  const at::Tensor g = at::randn_like(y);
  const auto want = torch::autograd::grad({expected}, {l->lora_A->weight, l->lora_B->weight, l->lora_magnitude_vector}, {g});
  const auto got = torch::autograd::grad({y}, {l->lora_A->weight, l->lora_B->weight, l->lora_magnitude_vector}, {g});
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(at::allclose(got[i], want[i], 1e-5, 1e-6)) << i;
}

TEST(Dora, MagnitudeStartsAtTheBaseRowNormsSoNothingChanges) {
  FinetuningSpec spec;
  spec.type = "lora";
  spec.use_dora = true;
  spec.lora_target = {"q_proj"};
  const auto m = build(spec);
  EXPECT_EQ(trained(*m).count("model.layers.0.self_attn.q_proj.lora_magnitude_vector"), 1u);
  EXPECT_EQ(m->placement("model.layers.0.self_attn.q_proj.lora_magnitude_vector").tp.role, TpRole::ColumnParallel);
  const std::uint64_t seed = 5;
  FinetuningWeights weights(*m, std::make_unique<InitWeights>(*m, seed), std::make_unique<InitWeights>(*m, seed));
  load_weights(*m, weights);
  const at::Tensor w = init_parameter("model.layers.0.self_attn.q_proj.weight", m->named_parameters()["model.layers.0.self_attn.q_proj.weight"].sizes(), seed);
  EXPECT_TRUE(at::allclose(m->named_parameters()["model.layers.0.self_attn.q_proj.lora_magnitude_vector"],
                           at::linalg_vector_norm(w, 2, {1}), 1e-6, 0));
  // Rows 2..4 alone (a rank's shard) are those rows' norms.
  at::Tensor rows = at::empty({3});
  weights.read_rows("model.layers.0.self_attn.q_proj.lora_magnitude_vector", 2, 3, rows);
  EXPECT_TRUE(at::allclose(rows, at::linalg_vector_norm(w.narrow(0, 2, 3), 2, {1}), 1e-6, 0));
  // B = 0: the model is the base model.
  const std::shared_ptr<CausalLM> plain = create_causal_lm(tiny(), {});
  init_weights(*plain, seed);
  const at::Tensor ids = at::arange(12, at::kLong).view({2, 6});
  at::NoGradGuard no_grad;
  EXPECT_TRUE(at::allclose(m->forward(ids), plain->forward(ids), 1e-5, 1e-5));
}

TEST(Lora, InitialisationIsPeftsAndDependsOnlyOnTheName) {
  const at::Tensor a = init_parameter("model.layers.0.mlp.up_proj.lora_A.weight", {8, 100}, 42);
  EXPECT_LE(a.abs().max().item<double>(), 0.1);  // kaiming_uniform(a=sqrt(5)): bound 1/sqrt(100)
  EXPECT_GT(a.abs().max().item<double>(), 0.09);
  EXPECT_TRUE(at::equal(a, init_parameter("model.layers.0.mlp.up_proj.lora_A.weight", {8, 100}, 42)));
  EXPECT_EQ(init_parameter("model.layers.0.mlp.up_proj.lora_B.weight", {100, 8}, 42).abs().sum().item<double>(), 0.0);
  FinetuningSpec spec;
  spec.use_rslora = true;
  spec.lora_rank = 16;
  spec.lora_alpha = 8;
  EXPECT_DOUBLE_EQ(spec.lora_scaling(), 2.0);  // alpha / sqrt(r)
  spec.use_rslora = false;
  EXPECT_DOUBLE_EQ(spec.lora_scaling(), 0.5);
}

TEST(Lora, AdaptersFollowTheirLinearsTensorParallelSplit) {
  FinetuningSpec spec;
  spec.type = "lora";
  const auto m = build(spec);
  auto role = [&](const std::string& name) { return m->placement(name).tp.role; };
  EXPECT_EQ(role("model.layers.1.self_attn.q_proj.lora_A.weight"), TpRole::ReplicatedInsideTp);
  EXPECT_EQ(role("model.layers.1.self_attn.q_proj.lora_B.weight"), TpRole::ColumnParallel);
  EXPECT_EQ(m->placement("model.layers.1.self_attn.k_proj.lora_B.weight").tp.what, "key/value heads");
  EXPECT_EQ(role("model.layers.1.self_attn.o_proj.lora_A.weight"), TpRole::RowParallel);
  EXPECT_EQ(role("model.layers.1.self_attn.o_proj.lora_B.weight"), TpRole::ReplicatedInsideTp);
  EXPECT_EQ(role("model.layers.1.mlp.down_proj.lora_A.weight"), TpRole::RowParallel);
  EXPECT_EQ(m->placement("model.layers.1.mlp.up_proj.lora_B.weight").units, (std::vector<std::int64_t>{2}));
}

TEST(Lora, DropoutMasksComeFromTheScopesSeed) {
  at::manual_seed(1);
  Linear l(16, 16, false);
  l->add_lora(4, 1.0, 0.5, 7);
  l->lora_A->weight.data().normal_();
  l->lora_B->weight.data().normal_();
  const at::Tensor x = at::randn({4, 16});
  const at::Tensor clean = l(x);
  at::Tensor a, b, c;
  {
    DropoutSeedScope seed(11);
    a = l(x);
    b = l(x);
  }
  {
    DropoutSeedScope seed(12);
    c = l(x);
  }
  EXPECT_FALSE(at::equal(a, clean)) << "dropout applies while training";
  EXPECT_TRUE(at::equal(a, b)) << "the same seed, the same masks (a recomputed layer)";
  EXPECT_FALSE(at::equal(a, c));
  at::NoGradGuard no_grad;
  DropoutSeedScope seed(11);
  EXPECT_TRUE(at::equal(l(x), clean)) << "no dropout without gradients (evaluation)";
}

// LlamaFactory's _setup_freeze_tuning: the last n layers (first -n), all modules or the named
// ones, extra modules by substring (so "norm" also trains every layer's norms, as there).
TEST(Freeze, LlamaFactorysRules) {
  FinetuningSpec spec;
  spec.type = "freeze";
  std::set<std::string> t = trained(*build(spec));  // default: the last 2 layers, all modules
  EXPECT_EQ(t.size(), 2u * 9);
  EXPECT_TRUE(t.count("model.layers.2.mlp.up_proj.weight") && t.count("model.layers.3.input_layernorm.weight"));
  EXPECT_FALSE(t.count("model.layers.1.mlp.up_proj.weight"));
  spec.freeze_trainable_layers = -1;
  spec.freeze_trainable_modules = {"mlp"};
  t = trained(*build(spec));
  EXPECT_EQ(t, (std::set<std::string>{"model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight",
                                      "model.layers.0.mlp.down_proj.weight"}));
  spec.freeze_extra_modules = {"norm"};
  t = trained(*build(spec));
  EXPECT_TRUE(t.count("model.norm.weight"));
  EXPECT_TRUE(t.count("model.layers.2.post_attention_layernorm.weight"));
  spec.freeze_extra_modules = {"rotary_emb"};
  std::string key;
  EXPECT_CONTAINS(error_of(spec, &key), "freeze_extra_modules names 'rotary_emb'");
  EXPECT_EQ(key, "freeze_extra_modules");
  spec.freeze_extra_modules = {};
  spec.freeze_trainable_modules = {"attention"};
  EXPECT_CONTAINS(error_of(spec, &key), "they have: all, input_layernorm, mlp, post_attention_layernorm, self_attn");
  spec.freeze_trainable_modules = {"all"};
  spec.freeze_trainable_layers = 0;
  EXPECT_CONTAINS(error_of(spec), "no parameter trains");
}

}  // namespace
}  // namespace lft::model
