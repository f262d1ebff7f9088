// grouped_experts (one autograd node for a layer's routed experts) against each expert's SwiGLU MLP
// written with autograd ops, forward and every gradient, in fp32 (MKL's GEMMs, rows as given) and
// bf16 (oneDNN's GEMMs over rows laid out in padded groups), with row counts that are zero, one,
// a multiple of the padding quantum and not, and large enough for a coarser quantum (600 -> 640);
// the gate and up weights go through one stacked GEMM ([g | u] rows), through the plain SwiGLU
// formula and through the paired fused kernels.
#include <limits>

#include <gtest/gtest.h>

#include <torch/torch.h>

#include "lft/model/fused.h"
#include "lft/model/grouped_experts.h"

namespace {

struct Experts {
  std::vector<at::Tensor> gate, up, down;
};

Experts make_experts(std::int64_t experts, std::int64_t width, std::int64_t hidden) {
  Experts w;
  for (std::int64_t e = 0; e < experts; ++e) {
    w.gate.push_back(torch::randn({width, hidden}).mul_(0.1).requires_grad_());
    w.up.push_back(torch::randn({width, hidden}).mul_(0.1).requires_grad_());
    w.down.push_back(torch::randn({hidden, width}).mul_(0.1).requires_grad_());
  }
  return w;
}

// Each expert's MLP on its rows in `dtype`, as ordinary autograd ops.
at::Tensor reference(const at::Tensor& rows, const std::vector<std::int64_t>& sizes, const Experts& w,
                     at::ScalarType dtype) {
  std::vector<at::Tensor> outs;
  std::int64_t row = 0;
  for (std::size_t e = 0; e < sizes.size(); row += sizes[e], ++e) {
    const at::Tensor x = rows.narrow(0, row, sizes[e]).to(dtype);
    const at::Tensor h = at::silu(at::mm(x, w.gate[e].to(dtype).t())) * at::mm(x, w.up[e].to(dtype).t());
    outs.push_back(at::mm(h, w.down[e].to(dtype).t()));
  }
  return at::cat(outs);
}

double relative_difference(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kFloat) - b.to(at::kFloat)).abs().max().item<double>() /
         std::max(b.to(at::kFloat).abs().max().item<double>(), 1e-30);
}

void check_against_reference(at::ScalarType dtype, double tolerance) {
  torch::manual_seed(7);
  const std::int64_t hidden = 48, width = 40;
  const std::vector<std::int64_t> sizes{5, 0, 1, 32, 37, 64, 600, 3};
  std::int64_t total = 0;
  for (const std::int64_t n : sizes) total += n;
  const Experts w = make_experts(static_cast<std::int64_t>(sizes.size()), width, hidden);
  {  // expert 1 has no rows and NaN weights: a GEMM that read its matrix would spread them
    at::NoGradGuard no_grad;
    for (const auto* list : {&w.gate, &w.up, &w.down}) (*list)[1].fill_(std::numeric_limits<float>::quiet_NaN());
  }
  const at::Tensor rows = torch::randn({total, hidden}).requires_grad_();
  const at::Tensor dy = torch::randn({total, hidden});

  const at::Tensor got = lft::model::grouped_experts(rows.to(dtype), sizes, w.gate, w.up, w.down);
  ASSERT_EQ(got.scalar_type(), dtype);
  auto params = [&] {
    std::vector<at::Tensor> all{rows};
    for (const auto* list : {&w.gate, &w.up, &w.down}) all.insert(all.end(), list->begin(), list->end());
    return all;
  }();
  const std::vector<at::Tensor> got_grads = torch::autograd::grad({got}, params, {dy.to(dtype)});
  const at::Tensor want = reference(rows, sizes, w, dtype);
  const std::vector<at::Tensor> want_grads =
      torch::autograd::grad({want}, params, {dy.to(dtype)}, std::nullopt, false, /*allow_unused=*/true);

  EXPECT_LT(relative_difference(got, want), tolerance);
  for (std::size_t i = 0; i < params.size(); ++i) {
    SCOPED_TRACE("parameter " + std::to_string(i));
    ASSERT_TRUE(got_grads[i].defined());
    if (!want_grads[i].defined()) {  // an expert no row reached: a zero gradient, not none
      EXPECT_EQ(got_grads[i].abs().max().item<float>(), 0.0f);
      continue;
    }
    EXPECT_LT(relative_difference(got_grads[i], want_grads[i]), tolerance);
  }
}

TEST(GroupedExperts, Fp32EqualsEachExpertsMlp) { check_against_reference(at::kFloat, 1e-6); }

// bf16 on a CPU lays the rows out in padded groups; a row read from the wrong place, or padding
// rows that are not zero, differ by O(1).
TEST(GroupedExperts, Bf16EqualsEachExpertsMlp) { check_against_reference(at::kBFloat16, 2e-2); }

// The tests above run with the fused kernels off (the default outside a run): the gate and up
// halves of the stacked GEMM's rows [g | u] through the plain formula. Here through the paired
// SwiGLU kernels (swiglu_*_paired): a half read from the other's columns differs by O(1).
TEST(GroupedExperts, WithTheFusedKernelsEqualsEachExpertsMlp) {
  if (!lft::model::fused_kernels_supported()) GTEST_SKIP() << "this CPU has no AVX2/FMA: the fused kernels never run here";
  const unsigned previous = lft::model::fused_kernels();
  lft::model::set_fused_kernels(lft::model::kFusedSwiGlu);
  check_against_reference(at::kFloat, 1e-6);
  check_against_reference(at::kBFloat16, 2e-2);
  lft::model::set_fused_kernels(previous);
}

}  // namespace
