// Float8 linears: tensorwise dynamic scaling and the three float8 matmuls.
#include "lft/model/float8.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <cstdint>
#include <stdexcept>

#include "lft/model/autocast.h"
#include "lft/model/causal_lm.h"
#include "lft/model/layers.h"

namespace lft::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr double kEps = 1e-12;  // torchao's floor on amax

// A row-major [k, n] operand as _scaled_mm's second argument wants it: column-major.
at::Tensor column_major(const at::Tensor& t) { return t.t().contiguous().t(); }

// On CUDA, _scaled_mm. On the CPU, the float8 operands widened to fp32 (exactly: every e4m3 and
// e5m2 value is an fp32 value) and multiplied in fp32, which is _scaled_mm's arithmetic (exact
// products, fp32 sums, then the scales) in another summation order: LibTorch's CPU _scaled_mm
// ranges from bf16's rate to 0.06 GFLOP/s (on AMX CPUs, measured), the fp32 GEMM does not.
thread_local Float8GemmLog* g_gemm_log = nullptr;

at::Tensor scaled_mm(const Float8Tensor& a, const Float8Tensor& b_column_major, at::ScalarType out) {
  if (g_gemm_log != nullptr) g_gemm_log->gemms.push_back({a.data.sizes().vec(), b_column_major.data.sizes().vec()});
  if (a.data.device().is_cpu())
    return (at::mm(a.data.to(at::kFloat), b_column_major.data.to(at::kFloat)) * (a.inv_scale * b_column_major.inv_scale))
        .to(out);
  return at::_scaled_mm(a.data, b_column_major.data, a.inv_scale, b_column_major.inv_scale, std::nullopt,
                        std::nullopt, out);
}

// _scaled_mm on CUDA takes operands whose dimensions are multiples of 16. The token count is one
// of them (the weight gradient's inner dimension): `t` [M, n] with zero rows appended up to a
// multiple of 16. Zero rows change no amax and add nothing to any product.
at::Tensor pad_tokens(const at::Tensor& t) {
  const std::int64_t m = t.size(0), padded = (m + kFloat8Multiple - 1) / kFloat8Multiple * kFloat8Multiple;
  if (padded == m) return t;
  return at::cat({t, at::zeros({padded - m, t.size(1)}, t.options())});
}

// The amax of `t`, agreed over the tensor-parallel group when `split`.
at::Tensor amax_of(const at::Tensor& t, const Float8Sharding* sharding, bool split) {
  at::NoGradGuard no_grad;
  at::Tensor a = t.abs().max().to(at::kFloat);
  if (sharding != nullptr && split) sharding->max_over_group(a);
  return a;
}

// Function::apply passes only tensors and IValues: the sharding travels as its address (it is
// owned by the linear, which outlives the step).
std::int64_t address_of(const Float8Sharding* s) { return static_cast<std::int64_t>(reinterpret_cast<std::intptr_t>(s)); }
const Float8Sharding* sharding_at(std::int64_t a) {
  return reinterpret_cast<const Float8Sharding*>(static_cast<std::intptr_t>(a));
}

struct Float8LinearFunction : torch::autograd::Function<Float8LinearFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, std::int64_t out,
                            const at::Tensor& weight8, const at::Tensor& weight8_inv_scale, std::int64_t sharding_address) {
    const auto out_dtype = static_cast<at::ScalarType>(out);
    const Float8Sharding* sharding = sharding_at(sharding_address);
    const at::Tensor x2 = x.reshape({-1, x.size(-1)});
    const std::int64_t tokens = x2.size(0);
    const Float8Tensor xq = to_float8(pad_tokens(x2), at::kFloat8_e4m3fn, amax_of(x2, sharding, sharding && sharding->input));
    const Float8Tensor wq = weight8.numel() > 0 ? Float8Tensor{weight8, weight8_inv_scale}
                                                : to_float8(weight, at::kFloat8_e4m3fn, amax_of(weight, sharding, true));
    const at::Tensor y = scaled_mm(xq, {wq.data.t(), wq.inv_scale}, out_dtype).narrow(0, 0, tokens);
    // x's float8 copy serves only the weight's gradient: a frozen weight's linear does not keep it.
    const bool weight_grad = weight.requires_grad();
    ctx->save_for_backward({weight_grad ? xq.data : at::Tensor(), weight_grad ? xq.inv_scale : at::Tensor(), wq.data, wq.inv_scale});
    ctx->saved_data["x_sizes"] = x.sizes().vec();
    ctx->saved_data["x_dtype"] = static_cast<std::int64_t>(x.scalar_type());
    ctx->saved_data["w_dtype"] = static_cast<std::int64_t>(weight.scalar_type());
    ctx->saved_data["sharding"] = sharding_address;
    std::vector<std::int64_t> shape = x.sizes().vec();
    shape.back() = weight.size(0);
    return y.view(shape);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Float8Tensor xq{saved[0], saved[1]}, wq{saved[2], saved[3]};
    const auto x_sizes = ctx->saved_data["x_sizes"].toIntVector();
    const auto x_dtype = static_cast<at::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    const auto w_dtype = static_cast<at::ScalarType>(ctx->saved_data["w_dtype"].toInt());
    const Float8Sharding* sharding = sharding_at(ctx->saved_data["sharding"].toInt());
    const at::Tensor g2 = grads[0].reshape({-1, wq.data.size(0)});
    const std::int64_t tokens = g2.size(0);
    const Float8Tensor gq = to_float8(pad_tokens(g2), at::kFloat8_e5m2, amax_of(g2, sharding, sharding && sharding->grad_output));
    // dx [M, in] = dy [M, out] @ W [out, in];  dW [out, in] = dy^T [out, M] @ x [M, in].
    const at::Tensor dx = scaled_mm(gq, {column_major(wq.data), wq.inv_scale}, x_dtype).narrow(0, 0, tokens).view(x_sizes);
    // A frozen weight (LoRA's base, freeze) needs no gradient: its matmul is skipped.
    const at::Tensor dw = ctx->needs_input_grad(1)
                              ? scaled_mm({gq.data.t().contiguous(), gq.inv_scale}, {column_major(xq.data), xq.inv_scale}, w_dtype)
                              : at::Tensor();
    return {dx, dw, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

Float8GemmLog::Float8GemmLog() : previous_(g_gemm_log) { g_gemm_log = this; }
Float8GemmLog::~Float8GemmLog() { g_gemm_log = previous_; }

double float8_max(at::ScalarType dtype) {
  if (dtype == at::kFloat8_e4m3fn) return 448.0;
  if (dtype == at::kFloat8_e5m2) return 57344.0;
  throw std::invalid_argument("float8_max: not a float8 dtype");
}

Float8Tensor to_float8(const at::Tensor& x, at::ScalarType dtype, const at::Tensor& amax) {
  at::NoGradGuard no_grad;
  const double fmax = float8_max(dtype);
  const at::Tensor a = amax.defined() ? amax : x.abs().max().to(at::kFloat);
  // In double, then fp32, as torchao's amax_to_scale.
  const at::Tensor scale = (fmax / a.to(at::kDouble).clamp_min(kEps)).to(at::kFloat);
  Float8Tensor out;
  out.data = (x.to(at::kFloat) * scale).clamp(-fmax, fmax).to(dtype);
  out.inv_scale = scale.reciprocal();
  return out;
}

at::Tensor float8_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                         const Float8Tensor& weight8, const Float8Sharding* sharding) {
  const at::ScalarType out = compute_dtype(x);
  // Under autocast the input is cast to the compute dtype first (its amax is of those values).
  const at::Tensor in = x.scalar_type() == out ? x : x.to(out);
  // Function::apply takes no undefined tensors: an empty one stands for "cast the weight here".
  const at::Tensor none = at::empty({0}, x.options().dtype(at::kFloat));
  at::Tensor y = Float8LinearFunction::apply(in, weight, static_cast<std::int64_t>(out),
                                             weight8.data.defined() ? weight8.data : none,
                                             weight8.data.defined() ? weight8.inv_scale : none, address_of(sharding));
  return bias.defined() ? y + bias.to(out) : y;
}

int use_float8_linears(CausalLM& model) {
  int n = 0;
  for (const auto& item : model.named_modules()) {
    auto linear = std::dynamic_pointer_cast<LinearImpl>(item.value());
    if (!linear || item.key().rfind("model.layers.", 0) != 0 || item.key().find(".lora_") != std::string::npos) continue;
    linear->float8 = true;
    ++n;
  }
  return n;
}

}  // namespace lft::model
