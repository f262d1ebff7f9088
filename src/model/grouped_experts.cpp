// The routed experts of a layer as one autograd node (grouped_experts.h).
#include "lft/model/grouped_experts.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include "fused_kernels.h"
#include "lft/model/fused.h"

namespace lft::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The fused SwiGLU kernels where the config turns them on and the CPU has them, else the formula.
bool kernels_apply(const at::Tensor& t) {
  return (fused_kernels() & kFusedSwiGlu) != 0 && fused_kernels_supported() && t.device().is_cpu() &&
         (t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16);
}

at::Tensor swiglu(const at::Tensor& g, const at::Tensor& u) {
  if (!kernels_apply(g)) return at::silu(g) * u;
  at::Tensor h = at::empty_like(g);
  if (g.scalar_type() == at::kFloat)
    kernels::swiglu_forward(g.data_ptr<float>(), u.data_ptr<float>(), h.data_ptr<float>(), g.numel());
  else
    kernels::swiglu_forward(g.data_ptr<at::BFloat16>(), u.data_ptr<at::BFloat16>(), h.data_ptr<at::BFloat16>(), g.numel());
  return h;
}

// (dg, du) of h = silu(g) * u.
std::pair<at::Tensor, at::Tensor> swiglu_backward(const at::Tensor& dh, const at::Tensor& g, const at::Tensor& u) {
  if (!kernels_apply(g)) {
    const at::Tensor s = at::sigmoid(g);
    return {dh * u * s * (1 + g * (1 - s)), dh * g * s};
  }
  at::Tensor dg = at::empty_like(g), du = at::empty_like(g);
  if (g.scalar_type() == at::kFloat)
    kernels::swiglu_backward(dh.data_ptr<float>(), g.data_ptr<float>(), u.data_ptr<float>(), dg.data_ptr<float>(),
                             du.data_ptr<float>(), g.numel());
  else
    kernels::swiglu_backward(dh.data_ptr<at::BFloat16>(), g.data_ptr<at::BFloat16>(), u.data_ptr<at::BFloat16>(),
                             dg.data_ptr<at::BFloat16>(), du.data_ptr<at::BFloat16>(), g.numel());
  return {dg, du};
}

// The experts' weights (gate..., up..., down...) of `list` cast into three compute-dtype stacks
// [E, width, hidden], [E, width, hidden], [E, hidden, width].
struct Stacks {
  at::Tensor gate, up, down;
};
Stacks cast_weights(const variable_list& list, std::size_t first, std::int64_t experts, at::ScalarType dtype) {
  const at::Tensor& g0 = list[first];
  const auto options = g0.options().dtype(dtype);
  Stacks s{at::empty({experts, g0.size(0), g0.size(1)}, options), at::empty({experts, g0.size(0), g0.size(1)}, options),
           at::empty({experts, g0.size(1), g0.size(0)}, options)};
  at::NoGradGuard no_grad;
  for (std::int64_t e = 0; e < experts; ++e) {
    const auto i = static_cast<std::size_t>(e);
    s.gate[e].copy_(list[first + i]);
    s.up[e].copy_(list[first + static_cast<std::size_t>(experts) + i]);
    s.down[e].copy_(list[first + 2 * static_cast<std::size_t>(experts) + i]);
  }
  return s;
}

// dst = a @ b, written into dst (a view: a block of rows of a buffer).
void mm_into(at::Tensor dst, const at::Tensor& a, const at::Tensor& b) { at::mm_out(dst, a, b); }

std::vector<std::int64_t> sizes_of(const at::Tensor& sizes) {
  const std::int64_t* p = sizes.data_ptr<std::int64_t>();
  return std::vector<std::int64_t>(p, p + sizes.numel());
}

struct GroupedExperts : public torch::autograd::Function<GroupedExperts> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& rows, at::TensorList weights, const at::Tensor& sizes) {
    const at::DeviceType device = rows.device().type();
    const at::ScalarType dtype =
        at::autocast::is_autocast_enabled(device) ? at::autocast::get_autocast_dtype(device) : rows.scalar_type();
    const std::vector<std::int64_t> n = sizes_of(sizes);
    const auto experts = static_cast<std::int64_t>(n.size());
    const variable_list list(weights.begin(), weights.end());
    const Stacks w = cast_weights(list, 0, experts, dtype);
    const at::Tensor x = rows.to(dtype).contiguous();
    const std::int64_t r = x.size(0), width = w.gate.size(1);
    at::Tensor g = at::empty({r, width}, x.options()), u = at::empty({r, width}, x.options());
    at::Tensor out = at::empty({r, x.size(1)}, x.options());
    std::int64_t row = 0;
    for (std::int64_t e = 0; e < experts; row += n[static_cast<std::size_t>(e)], ++e) {
      const std::int64_t k = n[static_cast<std::size_t>(e)];
      if (k == 0) continue;
      mm_into(g.narrow(0, row, k), x.narrow(0, row, k), w.gate[e].t());
      mm_into(u.narrow(0, row, k), x.narrow(0, row, k), w.up[e].t());
    }
    const at::Tensor h = swiglu(g, u);
    row = 0;
    for (std::int64_t e = 0; e < experts; row += n[static_cast<std::size_t>(e)], ++e) {
      const std::int64_t k = n[static_cast<std::size_t>(e)];
      if (k != 0) mm_into(out.narrow(0, row, k), h.narrow(0, row, k), w.down[e].t());
    }
    variable_list saved{x, g, u, sizes};
    saved.insert(saved.end(), list.begin(), list.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["rows_dtype"] = static_cast<std::int64_t>(rows.scalar_type());
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &g = saved[1], &u = saved[2];
    const std::vector<std::int64_t> n = sizes_of(saved[3]);
    const auto experts = static_cast<std::int64_t>(n.size());
    const Stacks w = cast_weights(saved, 4, experts, x.scalar_type());
    const at::Tensor dy = grads[0].to(x.scalar_type()).contiguous();
    const at::Tensor h = swiglu(g, u);  // recomputed: cheaper than keeping it
    const std::int64_t width = w.gate.size(1), hidden = x.size(1);
    at::Tensor dh = at::empty_like(g), dx = at::empty_like(x);
    // Every expert's three weight gradients in one buffer (zero for an expert no row reached).
    at::Tensor dw = at::empty({experts, 3, width * hidden}, x.options());
    std::int64_t row = 0;
    for (std::int64_t e = 0; e < experts; row += n[static_cast<std::size_t>(e)], ++e) {
      const std::int64_t k = n[static_cast<std::size_t>(e)];
      if (k != 0) mm_into(dh.narrow(0, row, k), dy.narrow(0, row, k), w.down[e]);
    }
    const auto [dg, du] = swiglu_backward(dh, g, u);
    row = 0;
    for (std::int64_t e = 0; e < experts; row += n[static_cast<std::size_t>(e)], ++e) {
      const std::int64_t k = n[static_cast<std::size_t>(e)];
      const at::Tensor dgate = dw[e][0].view({width, hidden}), dup = dw[e][1].view({width, hidden}),
                       ddown = dw[e][2].view({hidden, width});
      if (k == 0) {
        dw[e].zero_();
        continue;
      }
      const at::Tensor xe = x.narrow(0, row, k), dge = dg.narrow(0, row, k), due = du.narrow(0, row, k);
      mm_into(dgate, dge.t(), xe);
      mm_into(dup, due.t(), xe);
      mm_into(ddown, dy.narrow(0, row, k).t(), h.narrow(0, row, k));
      at::Tensor dxe = dx.narrow(0, row, k);
      mm_into(dxe, dge, w.gate[e]);
      dxe.addmm_(due, w.up[e]);
    }
    // One conversion to the parameters' dtype; each gradient a view of it.
    const at::Tensor dw_param = dw.to(saved[4].scalar_type());
    variable_list out(static_cast<std::size_t>(3 * experts + 2));
    out[0] = dx.to(static_cast<at::ScalarType>(ctx->saved_data["rows_dtype"].toInt()));
    for (std::int64_t e = 0; e < experts; ++e) {
      const auto i = static_cast<std::size_t>(e), stride = static_cast<std::size_t>(experts);
      out[1 + i] = dw_param[e][0].view({width, hidden});
      out[1 + stride + i] = dw_param[e][1].view({width, hidden});
      out[1 + 2 * stride + i] = dw_param[e][2].view({hidden, width});
    }
    return out;  // the last, for `sizes`, undefined
  }
};

}  // namespace

at::Tensor grouped_experts(const at::Tensor& rows, const std::vector<std::int64_t>& sizes,
                           const std::vector<at::Tensor>& gate, const std::vector<at::Tensor>& up,
                           const std::vector<at::Tensor>& down) {
  std::vector<at::Tensor> weights;
  weights.reserve(gate.size() * 3);
  weights.insert(weights.end(), gate.begin(), gate.end());
  weights.insert(weights.end(), up.begin(), up.end());
  weights.insert(weights.end(), down.begin(), down.end());
  const at::Tensor counts = at::tensor(sizes, at::TensorOptions().dtype(at::kLong));
  return GroupedExperts::apply(rows, at::TensorList(weights), counts);
}

}  // namespace lft::model
