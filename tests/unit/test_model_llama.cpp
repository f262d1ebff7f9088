// The C++ Llama: HF parameter names, RMSNorm, RoPE, attention (GQA, causal, sliding window)
// against textbook implementations, and gradient checkpointing. The comparison with transformers
// itself is test_model_vs_transformers.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>

#include "lft/model/autocast.h"
#include "lft/model/checkpoint.h"
#include "lft/model/init.h"
#include "lft/model/llama.h"
#include "lft/model/loss.h"
#include "lft/model/safetensors.h"
#include "lft/model/segments.h"
#include "test_util.h"

namespace lft::model {
namespace {

ModelConfig tiny(std::int64_t layers = 2) { return test::tiny_llama(layers); }

at::Tensor ids_for(const ModelConfig& c, std::int64_t b, std::int64_t t, std::uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randint(1, c.vocab_size, {b, t}, gen, at::TensorOptions().dtype(at::kLong));
}

// Weights with O(1) effects (init_weights' 0.02 makes the layers nearly linear).
void randomize(torch::nn::Module& m, std::uint64_t seed) {
  at::NoGradGuard no_grad;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (auto& p : m.named_parameters()) {
    at::Tensor noise = at::randn(p.value().sizes(), gen, at::TensorOptions().dtype(at::kFloat));
    if (p.key().find("norm") != std::string::npos) {
      p.value().copy_(1.0 + 0.2 * noise);
    } else if (p.value().dim() == 2) {
      p.value().copy_(noise / std::sqrt(static_cast<double>(p.value().size(1))));
    } else {
      p.value().copy_(0.1 * noise);
    }
  }
}

double max_abs(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

TEST(Llama, ParameterNamesAreHuggingFaceNames) {
  LlamaForCausalLM m(tiny(2));
  std::vector<std::string> expected = {"model.embed_tokens.weight"};
  for (int i = 0; i < 2; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    for (const char* s :
         {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
          "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
          "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"}) {
      expected.push_back(p + s);
    }
  }
  expected.push_back("model.norm.weight");
  expected.push_back("lm_head.weight");
  std::vector<std::string> names;
  for (const auto& p : m->named_parameters()) names.push_back(p.key());
  EXPECT_EQ(names, expected);

  auto params = m->named_parameters();
  EXPECT_EQ(params["model.embed_tokens.weight"].sizes(), (std::vector<std::int64_t>{37, 32}));
  EXPECT_EQ(params["model.layers.1.self_attn.q_proj.weight"].sizes(),
            (std::vector<std::int64_t>{32, 32}));
  EXPECT_EQ(params["model.layers.1.self_attn.k_proj.weight"].sizes(),
            (std::vector<std::int64_t>{16, 32}));
  EXPECT_EQ(params["model.layers.1.mlp.down_proj.weight"].sizes(),
            (std::vector<std::int64_t>{32, 40}));
  EXPECT_EQ(params["lm_head.weight"].sizes(), (std::vector<std::int64_t>{37, 32}));
  // No buffers (inv_freq is not state).
  EXPECT_EQ(m->buffers().size(), 0u);
}

TEST(Llama, TiedAndBiasVariants) {
  ModelConfig c = tiny(1);
  c.tie_word_embeddings = true;
  c.attention_bias = true;  // Qwen2
  LlamaForCausalLM m(c);
  std::set<std::string> names;
  std::int64_t count = 0;
  for (const auto& p : m->named_parameters()) {
    names.insert(p.key());
    count += p.value().numel();
  }
  EXPECT_EQ(names.count("lm_head.weight"), 0u);
  EXPECT_EQ(names.count("model.layers.0.self_attn.q_proj.bias"), 1u);
  EXPECT_EQ(names.count("model.layers.0.self_attn.k_proj.bias"), 1u);
  EXPECT_EQ(names.count("model.layers.0.self_attn.v_proj.bias"), 1u);
  EXPECT_EQ(names.count("model.layers.0.self_attn.o_proj.bias"), 0u);
  EXPECT_EQ(count, c.num_parameters());

  c.attention_out_bias = c.mlp_bias = true;  // Llama with attention_bias and mlp_bias
  c.tie_word_embeddings = false;
  LlamaForCausalLM full(c);
  count = 0;
  for (const auto& p : full->parameters()) count += p.numel();
  EXPECT_EQ(count, c.num_parameters());
  EXPECT_NE(full->named_parameters().find("model.layers.0.mlp.down_proj.bias"), nullptr);
}

TEST(Llama, RMSNormMatchesFormula) {
  RMSNorm norm(8, 1e-6);
  {
    at::NoGradGuard g;
    norm->weight.copy_(at::arange(1, 9, at::kFloat) / 4.0);
  }
  const at::Tensor x = at::randn({3, 5, 8});
  const at::Tensor expect = norm->weight * x / at::sqrt(x.pow(2).mean(-1, true) + 1e-6);
  EXPECT_LT(max_abs(norm(x), expect), 1e-6);
  // bf16 input: normalised in fp32, cast back to bf16, then times the (fp32) weight.
  const at::Tensor xb = x.to(at::kBFloat16);
  const at::Tensor yb = norm(xb);
  EXPECT_EQ(yb.scalar_type(), at::kFloat);
  const at::Tensor x32 = xb.to(at::kFloat);
  const at::Tensor ref =
      norm->weight * (x32 * at::rsqrt(x32.pow(2).mean(-1, true) + 1e-6)).to(at::kBFloat16);
  EXPECT_EQ(max_abs(yb, ref), 0.0);
}

TEST(Llama, RotaryFrequenciesAndRotation) {
  ModelConfig c = tiny();
  c.rope_theta = 10000.0;
  RotaryEmbedding rope(c);
  const std::int64_t d = c.head_dim();  // 8
  ASSERT_EQ(rope.inv_freq().numel(), d / 2);
  for (std::int64_t i = 0; i < d / 2; ++i) {
    const double expect = 1.0 / std::pow(10000.0, 2.0 * static_cast<double>(i) / d);
    EXPECT_NEAR(rope.inv_freq()[i].item<double>(), expect, 1e-7 * expect);
  }
  const auto [cos, sin] = rope.cos_sin(6, at::TensorOptions().dtype(at::kFloat));
  ASSERT_EQ(cos.sizes(), (std::vector<std::int64_t>{6, d}));
  // Position 0 is the identity; dimension i pairs with i + d/2 (rotate-half, not interleaved).
  const at::Tensor x = at::randn({1, 1, 6, d});
  const at::Tensor y = apply_rotary(x, cos, sin);
  EXPECT_LT(max_abs(y.select(2, 0), x.select(2, 0)), 1e-7);
  const double angle = 3 * rope.inv_freq()[1].item<double>();  // position 3, pair (1, 5)
  const double a = x[0][0][3][1].item<double>(), b = x[0][0][3][5].item<double>();
  EXPECT_NEAR(y[0][0][3][1].item<double>(), a * std::cos(angle) - b * std::sin(angle), 1e-5);
  EXPECT_NEAR(y[0][0][3][5].item<double>(), b * std::cos(angle) + a * std::sin(angle), 1e-5);
  // <rot(q, m), rot(k, n)> depends on m - n only.
  const at::Tensor q = at::randn({d}), k = at::randn({d});
  auto rot = [&](const at::Tensor& v, std::int64_t pos) {
    return apply_rotary(v.view({1, 1, 1, d}), cos.narrow(0, pos, 1), sin.narrow(0, pos, 1))
        .view({d});
  };
  EXPECT_NEAR(at::dot(rot(q, 4), rot(k, 1)).item<double>(),
              at::dot(rot(q, 5), rot(k, 2)).item<double>(), 1e-5);
}

TEST(Llama, Llama3RopeScaling) {
  ModelConfig c = tiny();
  c.explicit_head_dim = 64;
  c.rope_theta = 500000.0;
  c.rope_type = "llama3";
  c.rope_factor = 8.0;
  c.rope_low_freq_factor = 1.0;
  c.rope_high_freq_factor = 4.0;
  c.rope_original_max_position_embeddings = 8192;
  const at::Tensor inv = RotaryEmbedding(c).inv_freq();
  const double pi = 3.141592653589793;
  int low = 0, mid = 0, high = 0;
  for (int i = 0; i < 32; ++i) {
    const double f = 1.0 / std::pow(500000.0, 2.0 * i / 64.0), wl = 2 * pi / f;
    double expect = f;
    if (wl > 8192.0) {
      expect = f / 8.0, ++low;
    } else if (wl >= 2048.0) {
      const double s = (8192.0 / wl - 1.0) / 3.0;
      expect = (1 - s) * f / 8.0 + s * f, ++mid;
    } else {
      ++high;
    }
    EXPECT_NEAR(inv[i].item<double>(), expect, 2e-6 * expect) << i;
  }
  EXPECT_GT(low, 0);
  EXPECT_GT(mid, 0);
  EXPECT_GT(high, 0);
}

// transformers' own rotary tables for a Llama 3.1 style config (tools/make-model-fixture.py).
TEST(Llama, RotaryMatchesTransformersLlama3) {
  const std::string here = __FILE__;
  const std::string dir = here.substr(0, here.rfind('/')) + "/../fixtures/rope-llama3";
  const ModelConfig c = ModelConfig::from_hf_folder(dir);
  ASSERT_EQ(c.rope_type, "llama3");
  const auto ref = read_safetensors(dir + "/rope.safetensors");
  const RotaryEmbedding rope(c);
  const auto [cos, sin] = rope.cos_sin(12, at::TensorOptions().dtype(at::kFloat));
  const double d_inv = max_abs(rope.inv_freq(), ref.at("inv_freq"));
  const double d_cos = max_abs(cos, ref.at("cos")), d_sin = max_abs(sin, ref.at("sin"));
  EXPECT_EQ(d_inv, 0.0);  // the same fp32 operations in the same order
  EXPECT_LE(d_cos, 1e-7);
  EXPECT_LE(d_sin, 1e-7);
  // The cached table, grown and narrowed, gives the same rows.
  rope.cos_sin(40, at::TensorOptions().dtype(at::kFloat));
  EXPECT_TRUE(at::equal(rope.cos_sin(12, at::TensorOptions().dtype(at::kFloat)).first, cos));
  EXPECT_TRUE(at::equal(rope.cos_sin(5, at::TensorOptions().dtype(at::kFloat)).second,
                        sin.narrow(0, 0, 5)));
  EXPECT_EQ(rope.cos_sin(5, at::TensorOptions().dtype(at::kBFloat16)).first.scalar_type(),
            at::kBFloat16);
  std::cout << "llama3 rope vs transformers: inv_freq " << d_inv << ", cos " << d_cos << ", sin "
            << d_sin << "\n";
}

// Textbook attention: repeat_kv (repeat_interleave), softmax(q k^T / sqrt(d) + mask) v.
at::Tensor reference_attention(LlamaAttentionImpl& attn, const ModelConfig& c, const at::Tensor& x,
                               const at::Tensor& cos, const at::Tensor& sin, std::int64_t window) {
  const std::int64_t b = x.size(0), t = x.size(1), h = c.num_attention_heads,
                     kv = c.num_key_value_heads, d = c.head_dim();
  at::Tensor q = attn.q_proj(x).view({b, t, h, d}).transpose(1, 2);
  at::Tensor k = attn.k_proj(x).view({b, t, kv, d}).transpose(1, 2);
  at::Tensor v = attn.v_proj(x).view({b, t, kv, d}).transpose(1, 2);
  q = apply_rotary(q, cos, sin);
  k = apply_rotary(k, cos, sin);
  k = k.repeat_interleave(h / kv, 1);
  v = v.repeat_interleave(h / kv, 1);
  at::Tensor scores = at::matmul(q, k.transpose(2, 3)) / std::sqrt(static_cast<double>(d));
  const auto idx = at::arange(t);
  at::Tensor allowed = idx.unsqueeze(0) <= idx.unsqueeze(1);
  if (window > 0) allowed = allowed & ((idx.unsqueeze(1) - idx.unsqueeze(0)) < window);
  scores = scores.masked_fill(allowed.logical_not(), -INFINITY);
  const at::Tensor o = at::matmul(at::softmax(scores, -1), v);
  return attn.o_proj(o.transpose(1, 2).reshape({b, t, h * d}));
}

TEST(Llama, AttentionMatchesTextbookGqa) {
  for (const std::int64_t window : {0, 3}) {
    ModelConfig c = tiny();
    c.attention_bias = true;
    c.sliding_window = window;
    LlamaAttention attn(c, 0);
    randomize(*attn, 11);
    const at::Tensor x = at::randn({2, 7, c.hidden_size});
    const auto [cos, sin] = RotaryEmbedding(c).cos_sin(7, x.options());
    const double diff = max_abs(attn(x, cos, sin), reference_attention(*attn, c, x, cos, sin,
                                                                        window));
    EXPECT_LT(diff, 1e-5) << "window " << window;
  }
}

TEST(Llama, ForwardIsCausal) {
  const ModelConfig c = tiny();
  LlamaForCausalLM m(c);
  randomize(*m, 5);
  at::NoGradGuard g;
  at::Tensor ids = ids_for(c, 2, 10, 1);
  const at::Tensor a = m(ids);
  ASSERT_EQ(a.sizes(), (std::vector<std::int64_t>{2, 10, 37}));
  ids[0][7].fill_((ids[0][7].item<std::int64_t>() % 30) + 2);
  const at::Tensor b = m(ids);
  EXPECT_EQ(max_abs(a.narrow(1, 0, 7), b.narrow(1, 0, 7)), 0.0);
  EXPECT_GT(max_abs(a.narrow(1, 7, 3), b.narrow(1, 7, 3)), 1e-3);
  // bf16 parameters run and give bf16 logits.
  LlamaForCausalLM half(c, at::TensorOptions().dtype(at::kBFloat16));
  EXPECT_EQ(half(ids).scalar_type(), at::kBFloat16);
}

// Neat packing: a row holding samples A (6 tokens), B (4 tokens) and 2 padding tokens gives each
// sample the logits it has alone (positions restart, attention stays in the segment), also with
// gradient checkpointing.
TEST(Llama, PackedSegmentsComputeWhatEachSampleDoesAlone) {
  const ModelConfig c = tiny();
  LlamaForCausalLM m(c);
  randomize(*m, 9);
  at::NoGradGuard g;
  const at::Tensor ids = ids_for(c, 1, 12, 3);
  const at::Tensor segments = at::tensor({1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 0, 0}, at::kLong).view({1, 12});
  for (bool checkpointing : {false, true}) {
    m->set_gradient_checkpointing(checkpointing);
    const at::Tensor packed = m->forward(ids, segments);
    const at::Tensor a = m->forward(ids.narrow(1, 0, 6));
    const at::Tensor b = m->forward(ids.narrow(1, 6, 4));
    EXPECT_LT(max_abs(packed.narrow(1, 0, 6), a), 1e-5);
    EXPECT_LT(max_abs(packed.narrow(1, 6, 4), b), 1e-5);
    EXPECT_GT(max_abs(packed.narrow(1, 6, 4), m->forward(ids).narrow(1, 6, 4)), 1e-3)
        << "without segments, B would see A";
  }
  EXPECT_TRUE(at::equal(segment_positions(segments),
                        at::tensor({0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 0, 1}, at::kLong).view({1, 12})));
  // Each row starts a segment; padding (id 0) counts as one.
  const at::Tensor two_rows = at::tensor({1, 1, 2, 2, 2, 3, 3, 3, 0, 0}, at::kInt).view({2, 5});
  EXPECT_TRUE(at::equal(segment_positions(two_rows), at::tensor({0, 1, 0, 1, 2, 0, 1, 2, 0, 1}, at::kLong).view({2, 5})));
}

// Every autograd node reachable from `t`'s grad_fn.
std::size_t graph_size(const at::Tensor& t) {
  std::unordered_set<torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> stack = {t.grad_fn().get()};
  while (!stack.empty()) {
    torch::autograd::Node* n = stack.back();
    stack.pop_back();
    if (n == nullptr || !seen.insert(n).second) continue;
    for (const auto& e : n->next_edges()) stack.push_back(e.function.get());
  }
  return seen.size();
}

TEST(Llama, GradientCheckpointingMatchesAndKeepsLessGraph) {
  const ModelConfig c = tiny(3);
  LlamaForCausalLM m(c);
  randomize(*m, 9);
  const at::Tensor ids = ids_for(c, 2, 12, 2);

  std::map<std::string, at::Tensor> grads[2];
  std::size_t nodes[2] = {0, 0};
  double losses[2] = {0, 0};
  for (int ckpt = 0; ckpt < 2; ++ckpt) {
    m->set_gradient_checkpointing(ckpt == 1);
    m->zero_grad();
    const at::Tensor loss = token_losses(m(ids), ids, 0).sum();
    nodes[ckpt] = graph_size(loss);
    losses[ckpt] = loss.item<double>();
    loss.backward();
    for (const auto& p : m->named_parameters()) grads[ckpt][p.key()] = p.value().grad().clone();
  }
  EXPECT_EQ(losses[0], losses[1]);
  for (const auto& [name, g] : grads[0]) {
    const double scale = g.abs().max().item<double>();
    EXPECT_LE(max_abs(g, grads[1][name]), 1e-6 * scale) << name;
  }
  // Without checkpointing the graph holds every op of every layer (and its saved activations);
  // with it, each layer is one node that saved only its input.
  EXPECT_GT(nodes[0], nodes[1] + 3 * 20);
  std::cout << "autograd nodes: " << nodes[0] << " without, " << nodes[1]
            << " with checkpointing\n";
}

// The recompute in backward runs outside the forward's autocast scope: it must restore the
// forward's bf16 autocast, or the gradients belong to an fp32 forward that never ran.
TEST(Llama, GradientCheckpointingRecomputesUnderTheForwardsAutocast) {
  const ModelConfig c = tiny(3);
  LlamaForCausalLM m(c);
  randomize(*m, 9);
  const at::Tensor ids = ids_for(c, 2, 12, 2);
  std::map<std::string, at::Tensor> grads[2];
  double losses[2] = {0, 0};
  for (int ckpt = 0; ckpt < 2; ++ckpt) {
    m->set_gradient_checkpointing(ckpt == 1);
    m->zero_grad();
    at::Tensor loss;
    {
      const AutocastScope autocast(at::kBFloat16, at::kCPU);
      loss = token_losses(m(ids), ids, 0).sum();
    }
    EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
    losses[ckpt] = loss.item<double>();
    loss.backward();
    EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU)) << "backward left autocast on";
    for (const auto& p : m->named_parameters()) grads[ckpt][p.key()] = p.value().grad().clone();
  }
  EXPECT_EQ(losses[0], losses[1]);
  for (const auto& [name, g] : grads[0]) {
    const double scale = g.abs().max().item<double>();
    EXPECT_LE(max_abs(g, grads[1][name]), 1e-6 * scale) << name;
  }
}

TEST(Llama, GradientCheckpointingFiresParameterHooksAndWorksWithFrozenEmbedding) {
  const ModelConfig c = tiny(2);
  LlamaForCausalLM m(c);
  randomize(*m, 3);
  m->set_gradient_checkpointing(true);
  at::Tensor w = m->named_parameters()["model.layers.0.mlp.up_proj.weight"];
  int fired = 0;
  w.register_hook([&fired](const at::Tensor& g) {
    ++fired;
    return g;
  });
  const at::Tensor ids = ids_for(c, 1, 6, 4);
  token_losses(m(ids), ids, 0).sum().backward();
  EXPECT_EQ(fired, 1);
  ASSERT_TRUE(w.grad().defined());
  const at::Tensor expect = w.grad().clone();

  // LoRA-style: the embedding frozen, so the first layer's input does not require grad.
  m->zero_grad();
  m->model->embed_tokens->weight.set_requires_grad(false);
  token_losses(m(ids), ids, 0).sum().backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_LE(max_abs(w.grad(), expect), 1e-6 * expect.abs().max().item<double>());
}

TEST(Llama, CheckpointWithoutGradModeIsPlainCall) {
  at::NoGradGuard g;
  const at::Tensor x = at::randn({4});
  const at::Tensor y = checkpoint([](const at::Tensor& t) { return t * 2; }, x);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(max_abs(y, x * 2), 0.0);
}

}  // namespace
}  // namespace lft::model
