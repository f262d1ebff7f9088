#include "lft/model/fused.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "fused_kernels.h"

namespace lft::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

unsigned g_fused = 0;

const std::pair<const char*, FusedKernel> kNames[] = {
    {"rmsnorm", kFusedRmsNorm},
    {"swiglu", kFusedSwiGlu},
    {"rotary", kFusedRotary},
    {"cross_entropy", kFusedCrossEntropy},
    {"attention", kFusedAttention},
    {"moe_combine", kFusedMoeCombine},
};

bool enabled(FusedKernel k) { return (g_fused & k) != 0; }

bool fp32_or_bf16(const at::Tensor& t) {
  return t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16;
}

bool on_cpu(const at::Tensor& t) { return t.defined() && t.device().is_cpu() && t.layout() == at::kStrided; }

using kernels::with_dtype;

// ---- RMSNorm (fp32 or bfloat16 input, fp32 weight, fp32 output) ----

struct RmsNormFunction : torch::autograd::Function<RmsNormFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, double eps) {
    const at::Tensor xc = x.contiguous();
    const std::int64_t n = x.size(-1), rows = xc.numel() / n;
    at::Tensor y = at::empty(xc.sizes(), xc.options().dtype(at::kFloat));
    at::Tensor rstd = at::empty({rows}, y.options());
    with_dtype(xc.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      LFT_KERNEL(rmsnorm_forward<T>)(xc.data_ptr<T>(), weight.data_ptr<float>(), y.data_ptr<float>(),
                                     rstd.data_ptr<float>(), rows, n, static_cast<float>(eps));
    });
    ctx->save_for_backward({xc, weight, rstd});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &weight = saved[1], &rstd = saved[2];
    const at::Tensor dy = grads[0].to(at::kFloat).contiguous();
    const std::int64_t n = x.size(-1), rows = x.numel() / n;
    at::Tensor dx = at::empty_like(x);
    at::Tensor dw = at::zeros_like(weight);
    with_dtype(x.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      LFT_KERNEL(rmsnorm_backward<T>)(dy.data_ptr<float>(), x.data_ptr<T>(), weight.data_ptr<float>(),
                                      rstd.data_ptr<float>(), dx.data_ptr<T>(), dw.data_ptr<float>(), rows, n);
    });
    return {dx, ctx->needs_input_grad(1) ? dw : at::Tensor(), at::Tensor()};
  }
};

// ---- SwiGLU ----

struct SwiGluFunction : torch::autograd::Function<SwiGluFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate, const at::Tensor& up) {
    const at::Tensor g = gate.contiguous(), u = up.contiguous();
    at::Tensor h = at::empty_like(g);
    with_dtype(g.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      LFT_KERNEL(swiglu_forward<T>)(g.data_ptr<T>(), u.data_ptr<T>(), h.data_ptr<T>(), g.numel());
    });
    ctx->save_for_backward({g, u});
    return h;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &g = saved[0], &u = saved[1];
    const at::Tensor dh = grads[0].to(g.scalar_type()).contiguous();
    at::Tensor dg = at::empty_like(g), du = at::empty_like(u);
    with_dtype(g.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      LFT_KERNEL(swiglu_backward<T>)(dh.data_ptr<T>(), g.data_ptr<T>(), u.data_ptr<T>(), dg.data_ptr<T>(),
                                     du.data_ptr<T>(), g.numel());
    });
    return {dg, du};
  }
};

// ---- rotary ----

struct RotaryFunction : torch::autograd::Function<RotaryFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
    const std::int64_t b = x.size(0), t = x.size(1), heads = x.size(2), d = x.size(3);
    at::Tensor y = at::empty(x.sizes(), x.options().dtype(at::kFloat));
    with_dtype(x.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      LFT_KERNEL(rotary_forward<T>)(x.data_ptr<T>(), cos.data_ptr<float>(), sin.data_ptr<float>(),
                                    y.data_ptr<float>(), b, t, heads, d);
    });
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["dtype"] = static_cast<std::int64_t>(x.scalar_type());
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &cos = saved[0], &sin = saved[1];
    const at::Tensor dy = grads[0].to(at::kFloat).contiguous();
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    const std::int64_t b = dy.size(0), t = dy.size(1), heads = dy.size(2), d = dy.size(3);
    at::Tensor dx = at::empty(dy.sizes(), dy.options().dtype(dtype));
    with_dtype(dtype, [&](auto tag) {
      using T = decltype(tag);
      LFT_KERNEL(rotary_backward<T>)(dy.data_ptr<float>(), cos.data_ptr<float>(), sin.data_ptr<float>(),
                                     dx.data_ptr<T>(), b, t, heads, d);
    });
    return {dx, at::Tensor(), at::Tensor()};
  }
};

// ---- cross-entropy ----

struct CrossEntropyFunction : torch::autograd::Function<CrossEntropyFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& ids,
                            std::int64_t ignore_id) {
    const std::int64_t b = logits.size(0), t = logits.size(1), v = logits.size(2);
    at::Tensor loss = at::empty({b, t - 1}, logits.options().dtype(at::kFloat));
    at::Tensor lse = at::empty_like(loss);
    std::int64_t bad = -1;
    with_dtype(logits.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      bad = LFT_KERNEL(cross_entropy_forward<T>)(logits.data_ptr<T>(), ids.data_ptr<std::int64_t>(),
                                                 loss.data_ptr<float>(), lse.data_ptr<float>(), b, t, v, ignore_id);
    });
    TORCH_CHECK(bad < 0, "Target ", bad, " is out of bounds.");
    ctx->save_for_backward({logits, ids, lse});
    ctx->saved_data["ignore_id"] = ignore_id;
    return loss;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &logits = saved[0], &ids = saved[1], &lse = saved[2];
    const at::Tensor grad = grads[0].to(at::kFloat).contiguous();
    const std::int64_t b = logits.size(0), t = logits.size(1), v = logits.size(2);
    at::Tensor dlogits = at::empty_like(logits);
    with_dtype(logits.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      LFT_KERNEL(cross_entropy_backward<T>)(grad.data_ptr<float>(), logits.data_ptr<T>(), ids.data_ptr<std::int64_t>(),
                                            lse.data_ptr<float>(), dlogits.data_ptr<T>(), b, t, v,
                                            ctx->saved_data["ignore_id"].toInt());
    });
    return {dlogits, at::Tensor(), at::Tensor()};
  }
};

// ---- the routed experts' outputs back to their tokens ----

struct CombineRowsFunction : torch::autograd::Function<CombineRowsFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& out, const at::Tensor& weights,
                            const at::Tensor& token_of, std::int64_t tokens) {
    // bf16 rows times bf16 weights (the router's dtype under autocast) give bf16 products.
    const bool bf16_products = out.scalar_type() == at::kBFloat16 && weights.scalar_type() == at::kBFloat16;
    const at::Tensor o = out.contiguous(), w = weights.to(at::kFloat).contiguous(), index = token_of.contiguous();
    const std::int64_t rows = index.numel(), width = o.size(1);
    // Each token's rows, ascending (counting sort by token).
    std::vector<std::int64_t> starts(static_cast<std::size_t>(tokens) + 1, 0), by_token(static_cast<std::size_t>(rows));
    const std::int64_t* t = index.data_ptr<std::int64_t>();
    for (std::int64_t r = 0; r < rows; ++r) ++starts[static_cast<std::size_t>(t[r]) + 1];
    for (std::size_t i = 1; i < starts.size(); ++i) starts[i] += starts[i - 1];
    std::vector<std::int64_t> cursor(starts.begin(), starts.end() - 1);
    for (std::int64_t r = 0; r < rows; ++r) by_token[static_cast<std::size_t>(cursor[static_cast<std::size_t>(t[r])]++)] = r;
    at::Tensor y = at::empty({tokens, width}, o.options().dtype(at::kFloat));
    with_dtype(o.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      LFT_KERNEL(combine_rows_forward<T>)(o.data_ptr<T>(), w.data_ptr<float>(), starts.data(), by_token.data(),
                                          y.data_ptr<float>(), tokens, width, bf16_products);
    });
    ctx->save_for_backward({o, w, index});
    ctx->saved_data["bf16_products"] = bf16_products;
    ctx->saved_data["weights_dtype"] = static_cast<std::int64_t>(weights.scalar_type());
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &o = saved[0], &w = saved[1], &index = saved[2];
    const at::Tensor g = grads[0].to(at::kFloat).contiguous();
    const bool bf16_products = ctx->saved_data["bf16_products"].toBool();
    at::Tensor dout = at::empty_like(o), dw = at::empty_like(w);
    with_dtype(o.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      LFT_KERNEL(combine_rows_backward<T>)(g.data_ptr<float>(), o.data_ptr<T>(), w.data_ptr<float>(),
                                           index.data_ptr<std::int64_t>(), dout.data_ptr<T>(), dw.data_ptr<float>(),
                                           o.size(0), o.size(1), bf16_products);
    });
    return {dout, dw.to(static_cast<at::ScalarType>(ctx->saved_data["weights_dtype"].toInt())), at::Tensor(),
            at::Tensor()};
  }
};

}  // namespace

unsigned parse_fused_kernels(const std::string& value) {
  if (value == "all") return kFusedAll;
  if (value == "none" || value.empty()) return 0;
  unsigned mask = 0;
  std::stringstream in(value);
  for (std::string item; std::getline(in, item, ',');) {
    const auto begin = item.find_first_not_of(' '), end = item.find_last_not_of(' ');
    item = begin == std::string::npos ? "" : item.substr(begin, end - begin + 1);
    bool known = false;
    for (const auto& [name, bit] : kNames)
      if (item == name) {
        mask |= bit;
        known = true;
      }
    if (!known) {
      std::string names;
      for (const auto& [name, bit] : kNames) names += (names.empty() ? "" : ", ") + std::string(name);
      throw std::invalid_argument("'" + item + "' is not a fused kernel: use \"all\", \"none\" or a comma list of " +
                                  names);
    }
  }
  return mask;
}

std::string fused_kernels_name(unsigned mask) {
  if (mask == 0) return "none";
  if (mask == kFusedAll) return "all";
  std::string out;
  for (const auto& [name, bit] : kNames)
    if (mask & bit) out += (out.empty() ? "" : ",") + std::string(name);
  return out;
}

void set_fused_kernels(unsigned mask) {
  if (mask != 0 && !fused_kernels_supported())
    throw std::invalid_argument("fused kernels need a CPU with AVX2 and FMA, which this one lacks");
  g_fused = mask;
}
unsigned fused_kernels() { return g_fused; }

bool fused_kernels_supported() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

namespace {

bool cpu_has_avx512() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

bool g_avx512 = cpu_has_avx512();

}  // namespace

namespace kernels {
bool avx512_selected() { return g_avx512; }
}  // namespace kernels

void set_kernel_isa(const std::string& isa) {
  if (isa == "avx2") {
    g_avx512 = false;
  } else if (isa == "avx512" || isa == "auto") {
    if (isa == "avx512" && !cpu_has_avx512())
      throw std::invalid_argument("the AVX-512 kernels need AVX-512 F, BW, VL and DQ, which this CPU lacks");
    g_avx512 = cpu_has_avx512();
  } else {
    throw std::invalid_argument("'" + isa + "' is not a kernel instruction set: use auto, avx2 or avx512");
  }
}

std::string kernel_isa() { return g_avx512 ? "avx512" : "avx2"; }

at::Tensor fused_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  if (!enabled(kFusedRmsNorm) || !on_cpu(x) || !on_cpu(weight) || !fp32_or_bf16(x) ||
      weight.scalar_type() != at::kFloat || weight.dim() != 1 || x.size(-1) != weight.size(0))
    return {};
  return RmsNormFunction::apply(x, weight, eps);
}

at::Tensor fused_swiglu(const at::Tensor& gate, const at::Tensor& up) {
  if (!enabled(kFusedSwiGlu) || !on_cpu(gate) || !on_cpu(up) || !fp32_or_bf16(gate) ||
      gate.scalar_type() != up.scalar_type() || gate.sizes() != up.sizes())
    return {};
  return SwiGluFunction::apply(gate, up);
}

at::Tensor fused_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  if (!enabled(kFusedRotary) || !on_cpu(x) || !on_cpu(cos) || !on_cpu(sin) || x.dim() != 4 ||
      !x.is_contiguous() || !fp32_or_bf16(x) || cos.scalar_type() != at::kFloat ||
      sin.scalar_type() != at::kFloat || !cos.is_contiguous() || !sin.is_contiguous() ||
      x.size(3) % 2 != 0 || x.size(3) > 512 || cos.dim() != 2 || cos.size(0) != x.size(1) ||
      cos.size(1) != x.size(3) || sin.sizes() != cos.sizes())
    return {};
  return RotaryFunction::apply(x, cos, sin).transpose(1, 2);
}

double sum_of_squares(const at::Tensor& t) {
  if (fused_kernels_supported() && on_cpu(t) && t.scalar_type() == at::kFloat && t.is_contiguous())
    return LFT_KERNEL(sum_squares)(t.data_ptr<float>(), t.numel());
  return t.to(at::kDouble).pow(2).sum().item<double>();
}

at::Tensor fused_token_losses(const at::Tensor& logits, const at::Tensor& input_ids, std::int64_t ignore_id) {
  if (!enabled(kFusedCrossEntropy) || !on_cpu(logits) || !on_cpu(input_ids) || logits.dim() != 3 ||
      !logits.is_contiguous() || !fp32_or_bf16(logits) || input_ids.scalar_type() != at::kLong ||
      !input_ids.is_contiguous() || logits.size(1) < 2)
    return {};
  return CrossEntropyFunction::apply(logits, input_ids, ignore_id);
}

at::Tensor gather_rows(const at::Tensor& rows, const at::Tensor& index, at::ScalarType dtype, bool allow_kernel) {
  const bool kernel = allow_kernel && fused_kernels_supported() && on_cpu(rows) && rows.dim() == 2 &&
                      fp32_or_bf16(rows) && (dtype == at::kFloat || dtype == at::kBFloat16);
  if (!kernel) {
    const at::Tensor kept = at::where(index >= 0, index, 0);
    return rows.to(dtype).index_select(0, kept).masked_fill_((index < 0).unsqueeze(1), 0);
  }
  const at::Tensor src = rows.contiguous(), idx = index.contiguous();
  at::Tensor out = at::empty({index.size(0), src.size(1)}, src.options().dtype(dtype));
  with_dtype(src.scalar_type(), [&](auto s) {
    with_dtype(dtype, [&](auto d) {
      using S = decltype(s);
      using D = decltype(d);
      LFT_KERNEL(gather_rows<S, D>)(src.data_ptr<S>(), idx.data_ptr<std::int64_t>(), out.data_ptr<D>(), out.size(0),
                                    out.size(1));
    });
  });
  return out;
}

at::Tensor fused_combine_rows(const at::Tensor& out, const at::Tensor& weights, const at::Tensor& token_of,
                              std::int64_t tokens, at::ScalarType result_dtype) {
  if (!enabled(kFusedMoeCombine) || !on_cpu(out) || !on_cpu(weights) || !on_cpu(token_of) || out.dim() != 2 ||
      !fp32_or_bf16(out) || !fp32_or_bf16(weights) || weights.dim() != 1 ||
      token_of.scalar_type() != at::kLong || weights.numel() != out.size(0) || token_of.numel() != out.size(0) ||
      result_dtype != at::kFloat)
    return {};
  return CombineRowsFunction::apply(out, weights, token_of, tokens);
}

}  // namespace lft::model
