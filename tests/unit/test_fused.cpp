// The fused CPU kernels (model/fused.h) against the plain formulas they replace: outputs and
// every input gradient, fp32 and bfloat16, on shapes with tails (sizes not multiples of the
// vector width), ignored targets and the last position of a sequence; each comparison in every
// build of the kernels the CPU runs (AVX2, and AVX-512 where it has it).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>

#include <functional>
#include <string>
#include <vector>

#include "lft/model/fused.h"
#include "lft/model/layers.h"
#include "lft/model/loss.h"

namespace lft::model {
namespace {

// Restores the process-wide choice after a test.
struct FusedScope {
  explicit FusedScope(unsigned mask) : previous(fused_kernels()) { set_fused_kernels(mask); }
  ~FusedScope() { set_fused_kernels(previous); }
  unsigned previous;
};

at::Tensor randn(std::vector<std::int64_t> shape, std::uint64_t seed, at::ScalarType dtype = at::kFloat) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn(shape, gen, at::TensorOptions().dtype(at::kFloat)).to(dtype).requires_grad_(true);
}

// f(inputs) with the kernel on and off: the outputs, and the gradients of sum(out * probe).
struct Run {
  at::Tensor out;
  std::vector<at::Tensor> grads;
  bool custom_node = false;  // the graph has a C++ autograd function: the fused kernel ran
};

bool has_custom_node(const std::shared_ptr<torch::autograd::Node>& node, int depth = 0) {
  if (!node || depth > 8) return false;
  if (node->name().find("CppNode") != std::string::npos) return true;
  for (const auto& edge : node->next_edges())
    if (has_custom_node(edge.function, depth + 1)) return true;
  return false;
}
Run run(unsigned mask, const std::vector<at::Tensor>& inputs,
        const std::function<at::Tensor(const std::vector<at::Tensor>&)>& f) {
  FusedScope scope(mask);
  std::vector<at::Tensor> xs;
  for (const auto& x : inputs) xs.push_back(x.detach().clone().requires_grad_(x.requires_grad()));
  const at::Tensor out = f(xs);
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(99);
  const at::Tensor probe = at::randn(out.sizes(), gen, at::TensorOptions().dtype(at::kFloat));
  (out.to(at::kFloat) * probe).sum().backward();
  Run r{out.detach().to(at::kFloat), {}, has_custom_node(out.grad_fn())};
  for (const auto& x : xs) r.grads.push_back(x.requires_grad() ? x.grad().to(at::kFloat) : at::Tensor());
  return r;
}

void expect_close(const at::Tensor& a, const at::Tensor& b, double tol, const char* what) {
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  const double scale = std::max(1.0, b.abs().max().item<double>());
  EXPECT_LE((a - b).abs().max().item<double>() / scale, tol) << what;
}

// The kernel builds this CPU runs; each test restores the automatic choice.
std::vector<std::string> kernel_builds() {
  set_kernel_isa("auto");
  std::vector<std::string> builds{"avx2"};
  if (kernel_isa() == "avx512") builds.push_back("avx512");
  return builds;
}

void compare(FusedKernel k, const std::vector<at::Tensor>& inputs,
             const std::function<at::Tensor(const std::vector<at::Tensor>&)>& f, double tol) {
  if (!fused_kernels_supported()) GTEST_SKIP() << "this CPU has no AVX2/FMA: the fused kernels never run here";
  const Run plain = run(0, inputs, f);
  EXPECT_FALSE(plain.custom_node);
  for (const std::string& build : kernel_builds()) {
    SCOPED_TRACE(build + " build");
    set_kernel_isa(build);
    const Run fused = run(k, inputs, f);
    EXPECT_TRUE(fused.custom_node) << "the fused kernel did not run";
    expect_close(fused.out, plain.out, tol, "output");
    for (std::size_t i = 0; i < inputs.size(); ++i)
      if (plain.grads[i].defined()) expect_close(fused.grads[i], plain.grads[i], tol, "gradient");
  }
  set_kernel_isa("auto");
}

TEST(Fused, RmsNormMatchesThePlainFormula) {
  RMSNorm norm(67, 1e-5, at::TensorOptions());
  {
    at::NoGradGuard g;
    norm->weight.copy_(randn({67}, 3).detach() * 0.3 + 1);
  }
  norm->weight.requires_grad_(true);
  compare(kFusedRmsNorm, {randn({3, 5, 67}, 1)}, [&](const auto& x) {
    norm->weight.mutable_grad().reset();
    return norm(x[0]);
  }, 2e-6);
  // The weight's gradient too (summed over rows and threads).
  auto weight_grad = [&](unsigned mask) {
    FusedScope scope(mask);
    norm->weight.mutable_grad().reset();
    const at::Tensor x = randn({4, 33, 67}, 2);
    (norm(x) * randn({4, 33, 67}, 5).detach()).sum().backward();
    return norm->weight.grad().clone();
  };
  if (fused_kernels_supported()) expect_close(weight_grad(kFusedRmsNorm), weight_grad(0), 2e-6, "weight gradient");
}

// Qwen3's query/key norm: bfloat16 rows (the projection's output under autocast), fp32 weight, a
// fp32 result (the weight times x * rstd rounded to bfloat16, as the formula computes it).
TEST(Fused, RmsNormOfBfloat16RowsMatchesThePlainFormula) {
  RMSNorm norm(64, 1e-6, at::TensorOptions());
  {
    at::NoGradGuard g;
    norm->weight.copy_(randn({64}, 3).detach() * 0.3 + 1);
  }
  norm->weight.requires_grad_(true);
  compare(kFusedRmsNorm, {randn({2, 9, 4, 64}, 1, at::kBFloat16)}, [&](const auto& x) {
    norm->weight.mutable_grad().reset();
    const at::Tensor y = norm(x[0]);
    EXPECT_EQ(y.scalar_type(), at::kFloat);
    return y;
  }, 1e-2);
  auto weight_grad = [&](unsigned mask) {
    FusedScope scope(mask);
    norm->weight.mutable_grad().reset();
    (norm(randn({3, 17, 64}, 2, at::kBFloat16)) * randn({3, 17, 64}, 5).detach()).sum().backward();
    return norm->weight.grad().clone();
  };
  if (fused_kernels_supported()) expect_close(weight_grad(kFusedRmsNorm), weight_grad(0), 1e-2, "weight gradient");
}

TEST(Fused, SwiGluMatchesThePlainFormula) {
  auto f = [](const auto& x) {
    const at::Tensor fused = fused_swiglu(x[0], x[1]);
    return fused.defined() ? fused : at::silu(x[0]) * x[1];
  };
  compare(kFusedSwiGlu, {randn({2, 7, 93}, 1), randn({2, 7, 93}, 2)}, f, 2e-6);
  // bfloat16: the plain path rounds silu's output before the product, the fused one does not.
  compare(kFusedSwiGlu, {randn({2, 7, 93}, 1, at::kBFloat16), randn({2, 7, 93}, 2, at::kBFloat16)}, f, 2e-2);
}

TEST(Fused, RotaryMatchesThePlainFormula) {
  const std::int64_t t = 11, d = 24;
  const at::Tensor angles = at::arange(t, at::kFloat).unsqueeze(1) * at::linspace(0.1, 1.3, d / 2).unsqueeze(0);
  const at::Tensor emb = at::cat({angles, angles}, -1);
  const at::Tensor cos = emb.cos(), sin = emb.sin();
  auto f = [&](const auto& x) { return rotary_bthd(x[0], cos, sin); };
  compare(kFusedRotary, {randn({2, t, 3, d}, 1)}, f, 2e-6);
  compare(kFusedRotary, {randn({2, t, 3, d}, 1, at::kBFloat16)}, f, 1e-2);
}

TEST(Fused, CrossEntropyMatchesThePlainLoss) {
  const std::int64_t b = 3, t = 9, v = 101;
  at::Tensor ids = at::randint(0, v, {b, t}, at::make_generator<at::CPUGeneratorImpl>(7), at::kLong);
  ids.index_put_({0, 4}, -100);  // an ignored target
  ids.index_put_({2, 1}, -100);
  auto f = [&](const auto& x) { return token_losses(x[0], ids, -100); };
  compare(kFusedCrossEntropy, {randn({b, t, v}, 1) * 3}, f, 2e-6);
  compare(kFusedCrossEntropy, {randn({b, t, v}, 1, at::kBFloat16)}, f, 1e-2);
}

TEST(Fused, CrossEntropyRefusesATargetOutsideTheVocabulary) {
  if (!fused_kernels_supported()) GTEST_SKIP() << "no AVX2/FMA here";
  FusedScope scope(kFusedCrossEntropy);
  const at::Tensor ids = at::full({1, 3}, 500, at::kLong);
  EXPECT_THROW(token_losses(at::zeros({1, 3, 10}), ids, -100), c10::Error);
}

// The grouped experts' layout moves: rows picked by index (zeros at -1), cast on the way, equal to
// index_select and masked_fill_ bit for bit in every dtype pair.
TEST(Fused, GatherRowsEqualsIndexSelect) {
  if (!fused_kernels_supported()) GTEST_SKIP() << "this CPU has no AVX2/FMA: the kernel never runs here";
  const at::Tensor index = at::tensor(std::vector<std::int64_t>{3, -1, 0, 0, 6, -1, 2}, at::kLong);
  for (const auto from : {at::kFloat, at::kBFloat16})
    for (const auto to : {at::kFloat, at::kBFloat16}) {
      const at::Tensor rows = randn({7, 45}, 9, from).detach();
      const at::Tensor want = gather_rows(rows, index, to, /*allow_kernel=*/false);
      for (const std::string& build : kernel_builds()) {
        set_kernel_isa(build);
        const at::Tensor got = gather_rows(rows, index, to);
        EXPECT_EQ(got.scalar_type(), to);
        EXPECT_TRUE(at::equal(got, want)) << from << " -> " << to << ", " << build << " build";
      }
      set_kernel_isa("auto");
      EXPECT_EQ(want[1].abs().sum().item<float>(), 0.f);
      EXPECT_TRUE(at::equal(want[4], rows[6].to(to)));
    }
}

// The routed experts' outputs back to their tokens: several rows a token, a token with none, the
// rows in no token order; forward as zeros + index_add of the products (fp32: the same sums, bit
// for bit), backward both gradients.
TEST(Fused, MoeCombineMatchesIndexAdd) {
  const at::Tensor token_of = at::tensor(std::vector<std::int64_t>{3, 0, 5, 3, 1, 0, 5, 2, 3}, at::kLong);
  auto f = [&](const std::vector<at::Tensor>& x) {
    if (at::Tensor y = fused_combine_rows(x[0], x[1], token_of, 6, at::kFloat); y.defined()) return y;
    return at::zeros({6, x[0].size(1)}).index_add(0, token_of, (x[0] * x[1].unsqueeze(1)).to(at::kFloat));
  };
  compare(kFusedMoeCombine, {randn({9, 37}, 1), randn({9}, 2)}, f, 1e-6);
  compare(kFusedMoeCombine, {randn({9, 37}, 3, at::kBFloat16), randn({9}, 4)}, f, 1e-2);
  // bf16 weights (the router's dtype under autocast): bf16 products, summed in fp32
  compare(kFusedMoeCombine, {randn({9, 37}, 3, at::kBFloat16), randn({9}, 4, at::kBFloat16)}, f, 1e-2);
  if (!fused_kernels_supported()) return;
  const std::vector<at::Tensor> x{randn({9, 37}, 5).detach(), randn({9}, 6).detach()};
  at::Tensor fused;
  {
    FusedScope scope(kFusedMoeCombine);
    fused = f(x);
  }
  EXPECT_TRUE(at::equal(fused, f(x)));
  const std::vector<at::Tensor> x16{x[0].to(at::kBFloat16), x[1].to(at::kBFloat16)};
  {
    FusedScope scope(kFusedMoeCombine);
    fused = f(x16);
  }
  EXPECT_TRUE(at::equal(fused, f(x16)));
}

TEST(Fused, ParsesItsConfigValue) {
  EXPECT_EQ(parse_fused_kernels("all"), unsigned{kFusedAll});
  EXPECT_EQ(parse_fused_kernels("none"), 0u);
  EXPECT_EQ(parse_fused_kernels("rmsnorm, cross_entropy"), unsigned{kFusedRmsNorm | kFusedCrossEntropy});
  EXPECT_EQ(fused_kernels_name(kFusedSwiGlu | kFusedRotary), "swiglu,rotary");
  EXPECT_THROW(parse_fused_kernels("rmsnorm,layernorm"), std::invalid_argument);
  EXPECT_EQ(parse_fused_kernels("attention,moe_combine"), unsigned{kFusedAttention | kFusedMoeCombine});
  EXPECT_THROW(set_kernel_isa("sse4"), std::invalid_argument);
  EXPECT_EQ(kernel_isa(), kernel_builds().back());
}

}  // namespace
}  // namespace lft::model
