// Float8 linears: the saturating e4m3/e5m2 casts against a reference rounding over every bf16
// value, tensorwise scales as torchao computes them, and the three float8 matmuls against the
// same products of the dequantized operands.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "lft/model/autocast.h"
#include "lft/model/float8.h"
#include "lft/model/layers.h"

namespace lft::model {
namespace {

// Every finite value of `dtype` (decoded by LibTorch), ascending, with its bits.
std::vector<std::pair<float, std::uint8_t>> finite_values(at::ScalarType dtype) {
  const at::Tensor codes = at::arange(256, at::kInt).to(at::kByte).view(dtype).to(at::kFloat);
  std::vector<std::pair<float, std::uint8_t>> out;
  for (int c = 0; c < 256; ++c) {
    const float v = codes[c].item<float>();
    if (std::isfinite(v) && !(v == 0 && std::signbit(v))) out.emplace_back(v, static_cast<std::uint8_t>(c));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Round to nearest, ties to the even code (the last mantissa bit 0), saturating at +-max.
float reference_cast(float x, const std::vector<std::pair<float, std::uint8_t>>& values) {
  const float max = values.back().first;
  if (x >= max) return max;
  if (x <= -max) return -max;
  auto hi = std::lower_bound(values.begin(), values.end(), std::make_pair(x, std::uint8_t{0}));
  if (hi->first == x) return x;
  auto lo = hi - 1;
  const float dl = x - lo->first, dh = hi->first - x;
  if (dl < dh) return lo->first;
  if (dh < dl) return hi->first;
  return (lo->second & 1) == 0 ? lo->first : hi->first;
}

TEST(Float8, SaturatingCastsMatchNearestEvenRoundingOverEveryBf16Value) {
  const at::Tensor bits = at::arange(65536, at::kInt).to(at::kShort);
  const at::Tensor all = bits.view(at::kBFloat16).to(at::kFloat);
  for (const at::ScalarType dtype : {at::kFloat8_e4m3fn, at::kFloat8_e5m2}) {
    const auto values = finite_values(dtype);
    // amax = the format's max gives scale 1: the cast alone.
    const Float8Tensor q = to_float8(all, dtype, at::scalar_tensor(float8_max(dtype), at::kFloat));
    EXPECT_EQ(q.inv_scale.item<float>(), 1.0f);
    const at::Tensor got = q.data.to(at::kFloat);
    const float* x = all.data_ptr<float>();
    const float* y = got.data_ptr<float>();
    int wrong = 0;
    for (int i = 0; i < 65536; ++i) {
      if (std::isnan(x[i])) {
        wrong += !std::isnan(y[i]);  // NaN stays NaN (clamp keeps it)
        continue;
      }
      const float want = reference_cast(x[i], values);
      if (!(want == y[i]) && ++wrong <= 5)
        ADD_FAILURE() << c10::toString(dtype) << ": " << x[i] << " -> " << y[i] << ", want " << want;
    }
    EXPECT_EQ(wrong, 0) << c10::toString(dtype);
  }
  EXPECT_EQ(float8_max(at::kFloat8_e4m3fn), 448.0);
  EXPECT_EQ(float8_max(at::kFloat8_e5m2), 57344.0);
}

TEST(Float8, TensorwiseScaleFromTheAbsoluteMaximum) {
  const at::Tensor x = at::tensor({0.5f, -3.0f, 1.25f});
  const Float8Tensor q = to_float8(x, at::kFloat8_e4m3fn);
  EXPECT_FLOAT_EQ(q.inv_scale.item<float>(), 3.0f / 448.0f);
  EXPECT_EQ(q.data.to(at::kFloat)[1].item<float>(), -448.0f);  // the amax maps to the format's max
  // A zero tensor: amax floored at 1e-12, no division by zero.
  const Float8Tensor z = to_float8(at::zeros({4}), at::kFloat8_e5m2);
  EXPECT_TRUE(std::isfinite(z.inv_scale.item<float>()));
  EXPECT_EQ(z.data.to(at::kFloat).abs().sum().item<float>(), 0.0f);
}

at::Tensor dequantized(const Float8Tensor& q) { return q.data.to(at::kFloat) * q.inv_scale; }

TEST(Float8, LinearRunsItsThreeMatmulsInFloat8) {
  at::manual_seed(3);
  const at::Tensor x = at::randn({2, 5, 32}).requires_grad_(true);
  const at::Tensor w = (at::randn({24, 32}) * 0.1).requires_grad_(true);
  const at::Tensor b = at::randn({24});
  const at::Tensor y = float8_linear(x, w, b);
  const at::Tensor dy = at::randn({2, 5, 24});
  y.backward(dy);
  const Float8Tensor xq = to_float8(x.detach().reshape({10, 32}), at::kFloat8_e4m3fn);
  const Float8Tensor wq = to_float8(w.detach(), at::kFloat8_e4m3fn);
  const Float8Tensor gq = to_float8(dy.reshape({10, 24}), at::kFloat8_e5m2);
  const at::Tensor want_y = at::matmul(dequantized(xq), dequantized(wq).t()).view({2, 5, 24}) + b;
  const at::Tensor want_dx = at::matmul(dequantized(gq), dequantized(wq)).view({2, 5, 32});
  const at::Tensor want_dw = at::matmul(dequantized(gq).t(), dequantized(xq));
  EXPECT_TRUE(at::allclose(y, want_y, 1e-5, 1e-5));
  EXPECT_TRUE(at::allclose(x.grad(), want_dx, 1e-5, 1e-5));
  EXPECT_TRUE(at::allclose(w.grad(), want_dw, 1e-5, 1e-5));
  // And near the fp32 linear: e4m3 keeps 3 mantissa bits (2^-4 relative per operand).
  const at::Tensor exact = at::linear(x.detach(), w.detach(), b);
  EXPECT_LT((y - exact).abs().max().item<double>() / exact.abs().max().item<double>(), 0.1);
}

// A frozen weight (LoRA's base): the input gradient is the same, and no weight gradient is formed.
TEST(Float8, FrozenWeightGetsNoGradientAndTheSameInputGradient) {
  at::manual_seed(5);
  const at::Tensor w = at::randn({24, 32}) * 0.1;
  const at::Tensor x = at::randn({2, 5, 32});
  const at::Tensor dy = at::randn({2, 5, 24});
  const at::Tensor x_trained = x.clone().requires_grad_(true), w_trained = w.clone().requires_grad_(true);
  float8_linear(x_trained, w_trained, {}).backward(dy);
  const at::Tensor x_frozen = x.clone().requires_grad_(true), w_frozen = w.clone();
  float8_linear(x_frozen, w_frozen, {}).backward(dy);
  EXPECT_TRUE(at::equal(x_frozen.grad(), x_trained.grad()));
  EXPECT_FALSE(w_frozen.grad().defined());
  EXPECT_TRUE(w_trained.grad().defined());
}

// _scaled_mm on CUDA needs every operand dimension to be a multiple of 16: 15 tokens are padded
// to 16 in all three GEMMs, and the results are those of the 15 tokens.
TEST(Float8, EveryGemmGetsDimensionsThatAreMultiplesOf16) {
  at::manual_seed(6);
  const at::Tensor x = at::randn({3, 5, 32}).requires_grad_(true);
  const at::Tensor w = (at::randn({48, 32}) * 0.1).requires_grad_(true);
  const at::Tensor dy = at::randn({3, 5, 48});
  Float8GemmLog log;
  const at::Tensor y = float8_linear(x, w, {});
  y.backward(dy);
  ASSERT_EQ(log.gemms.size(), 3u);  // forward, input gradient, weight gradient
  using Shape = std::vector<std::int64_t>;
  EXPECT_EQ(log.gemms[0], std::make_pair(Shape{16, 32}, Shape{32, 48}));
  EXPECT_EQ(log.gemms[1], std::make_pair(Shape{16, 48}, Shape{48, 32}));
  EXPECT_EQ(log.gemms[2], std::make_pair(Shape{48, 16}, Shape{16, 32}));
  for (const auto& [a, b] : log.gemms)
    for (const std::int64_t d : {a[0], a[1], b[0], b[1]}) EXPECT_EQ(d % kFloat8Multiple, 0) << d;
  EXPECT_EQ(y.sizes(), (at::IntArrayRef{3, 5, 48}));
  EXPECT_EQ(x.grad().sizes(), x.sizes());
  const Float8Tensor xq = to_float8(x.detach().reshape({15, 32}), at::kFloat8_e4m3fn);
  const Float8Tensor gq = to_float8(dy.reshape({15, 48}), at::kFloat8_e5m2);
  EXPECT_TRUE(at::allclose(w.grad(), at::matmul(dequantized(gq).t(), dequantized(xq)), 1e-5, 1e-5));
}

TEST(Float8, AutocastComputesInTheAutocastDtype) {
  at::manual_seed(4);
  Linear l(32, 16, false);
  l->weight.data().normal_();
  l->float8 = true;
  const at::Tensor x = at::randn({4, 32});
  at::Tensor y;
  {
    AutocastScope autocast(at::kBFloat16, at::kCPU);
    y = l(x);
  }
  EXPECT_EQ(y.scalar_type(), at::kBFloat16);
  // Near the fp32 product, within float8's error (e4m3: 2^-4 relative per operand).
  const at::Tensor exact = at::linear(x, l->weight);
  EXPECT_LT((y.to(at::kFloat) - exact).abs().max().item<double>() / exact.abs().max().item<double>(), 0.1);
}

}  // namespace
}  // namespace lft::model
