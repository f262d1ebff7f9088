// The routed experts of a layer as one autograd node (grouped_experts.h).
#include "lft/model/grouped_experts.h"

#include <algorithm>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "fused_kernels.h"
#include "lft/model/autocast.h"
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

// h = silu(g) * u over rows [g | u] (the fused gate-up GEMM's output, 2 x width wide).
at::Tensor swiglu(const at::Tensor& gu) {
  const std::int64_t width = gu.size(1) / 2;
  if (!kernels_apply(gu)) return at::silu(gu.narrow(1, 0, width)) * gu.narrow(1, width, width);
  at::Tensor h = at::empty({gu.size(0), width}, gu.options());
  kernels::with_dtype(gu.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    LFT_KERNEL(swiglu_forward_paired<T>)(gu.data_ptr<T>(), h.data_ptr<T>(), gu.size(0), width);
  });
  return h;
}

// [dg | du] of h = silu(g) * u, in the layout of gu.
at::Tensor swiglu_backward(const at::Tensor& dh, const at::Tensor& gu) {
  const std::int64_t width = gu.size(1) / 2;
  if (!kernels_apply(gu)) {
    const at::Tensor g = gu.narrow(1, 0, width), u = gu.narrow(1, width, width), s = at::sigmoid(g);
    return at::cat({dh * u * s * (1 + g * (1 - s)), dh * g * s}, 1);
  }
  at::Tensor dgu = at::empty_like(gu);
  kernels::with_dtype(gu.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    LFT_KERNEL(swiglu_backward_paired<T>)(dh.data_ptr<T>(), gu.data_ptr<T>(), dgu.data_ptr<T>(), gu.size(0), width);
  });
  return dgu;
}

// The experts' weights (gate..., up..., down...) of `list` cast into two compute-dtype stacks:
// gate_up [E, 2 x width, hidden] (each expert's gate rows, then its up rows: one GEMM computes
// both, and one gives both weight gradients) and down [E, hidden, width]. `rows`: each expert's
// rows (as laid out: zero only where it has none). Only the experts that have rows: an expert
// without rows has an empty group, whose matrix no GEMM reads (an expert-parallel rank computes
// its own rows in two calls, each with half of its experts).
struct Stacks {
  at::Tensor gate_up, down;
};
Stacks cast_weights(const variable_list& list, std::size_t first, const std::vector<std::int64_t>& rows,
                    at::ScalarType dtype) {
  const auto experts = static_cast<std::int64_t>(rows.size());
  const at::Tensor& g0 = list[first];
  const std::int64_t width = g0.size(0), hidden = g0.size(1);
  const auto options = g0.options().dtype(dtype);
  Stacks s{at::empty({experts, 2 * width, hidden}, options), at::empty({experts, hidden, width}, options)};
  at::NoGradGuard no_grad;
  for (std::int64_t e = 0; e < experts; ++e) {
    const auto i = static_cast<std::size_t>(e);
    if (rows[i] == 0) continue;
    s.gate_up[e].narrow(0, 0, width).copy_(list[first + i]);
    s.gate_up[e].narrow(0, width, width).copy_(list[first + static_cast<std::size_t>(experts) + i]);
    s.down[e].copy_(list[first + 2 * static_cast<std::size_t>(experts) + i]);
  }
  return s;
}

std::vector<std::int64_t> sizes_of(const at::Tensor& sizes) {
  const std::int64_t* p = sizes.data_ptr<std::int64_t>();
  return std::vector<std::int64_t>(p, p + sizes.numel());
}

// The experts' GEMMs over their row groups. On a CPU in bf16 the GEMMs are oneDNN's, which builds
// (JIT-compiles) a kernel for every new shape and keeps a bounded cache of them; the rows per expert
// change every step, so a GEMM per expert at its own row count builds kernels all the time (2.3x
// slower than the same GEMMs at shapes seen before, most of it mprotect's TLB shootdowns across the
// threads; measured on Zen 5). So there each expert's rows are laid out in a group whose size is
// rounded up to a multiple of 32 rows, or of an eighth of the size's power of two when that is
// larger (at most 12.5% more rows, and about eight sizes per doubling of rows, however many rows a
// step routes), the gaps zero rows (their products are zero and never read back; in a weight
// gradient they add zeros): the shapes repeat, and the cache holds them. fp32 GEMMs are MKL's,
// with no per-shape build: no padding. On the GPU, a loop of GEMMs written in place.
constexpr std::int64_t kMinRowQuantum = 32;

std::int64_t padded_group_rows(std::int64_t n) {
  std::int64_t power = 1;
  while (power * 2 <= n) power *= 2;
  const std::int64_t quantum = std::max(kMinRowQuantum, power / 8);
  return (n + quantum - 1) / quantum * quantum;
}

struct Groups {
  std::vector<std::int64_t> sizes;  // rows per expert as laid out (padded or not), in order
  at::Tensor ends;                  // their running sums, int32 (_grouped_mm's offs; only where it runs)
  at::Tensor positions;             // each row's place in the padded layout; undefined without padding
  at::Tensor sources;               // each laid-out row's row, -1 for padding; undefined without padding
  std::int64_t rows = 0;            // rows as laid out
};

// ATen's grouped GEMM on a CPU; a loop of GEMMs elsewhere.
bool grouped_gemm_applies(c10::Device device) { return device.is_cpu(); }

bool pads_rows(c10::Device device, at::ScalarType dtype) {
  return device.is_cpu() && dtype != at::kFloat && dtype != at::kDouble;
}

// The layout of rows grouped by `sizes` (int64, host) for GEMMs in `dtype` on `device`.
Groups groups_of(const at::Tensor& sizes, c10::Device device, at::ScalarType dtype) {
  Groups groups{sizes_of(sizes), {}, {}, {}, 0};
  if (pads_rows(device, dtype)) {
    std::vector<std::int64_t> positions, sources;
    for (std::int64_t& n : groups.sizes) {
      const std::int64_t first = static_cast<std::int64_t>(positions.size());
      for (std::int64_t i = 0; i < n; ++i) {
        positions.push_back(groups.rows + i);
        sources.push_back(first + i);
      }
      const std::int64_t padded = padded_group_rows(n);
      sources.insert(sources.end(), static_cast<std::size_t>(padded - n), -1);
      n = padded;
      groups.rows += n;
    }
    const auto index = at::TensorOptions().dtype(at::kLong);
    groups.positions = at::tensor(positions, index);
    groups.sources = at::tensor(sources, index);
  } else {
    for (const std::int64_t n : groups.sizes) groups.rows += n;
  }
  if (grouped_gemm_applies(device))
    groups.ends = at::tensor(groups.sizes, at::TensorOptions().dtype(at::kLong)).cumsum(0).to(at::kInt);
  return groups;
}

// rows [R, width] in the groups' layout (cast to `dtype`), and back.
at::Tensor to_layout(const at::Tensor& rows, const Groups& groups, at::ScalarType dtype) {
  if (!groups.sources.defined()) return rows.to(dtype).contiguous();
  return gather_rows(rows, groups.sources, dtype);
}
at::Tensor from_layout(const at::Tensor& rows, const Groups& groups, at::ScalarType dtype) {
  if (!groups.positions.defined()) return rows.to(dtype);
  return gather_rows(rows, groups.positions, dtype);
}

// [R, K] rows, b [E, K, N]: each expert's rows times its matrix, [R, N].
at::Tensor rows_times(const at::Tensor& a, const at::Tensor& b, const Groups& groups) {
  if (grouped_gemm_applies(a.device())) return at::_grouped_mm(a, b, groups.ends);
  at::Tensor out = at::empty({a.size(0), b.size(2)}, a.options());
  std::int64_t row = 0;
  for (std::size_t e = 0; e < groups.sizes.size(); row += groups.sizes[e], ++e) {
    const std::int64_t k = groups.sizes[e];
    if (k == 0) continue;
    at::Tensor block = out.narrow(0, row, k);
    at::mm_out(block, a.narrow(0, row, k), b[static_cast<std::int64_t>(e)]);
  }
  return out;
}

// a [R, M], b [R, N]: each expert's a_e^T b_e over its rows, [E, M, N] (zero for an expert no row
// reached).
at::Tensor outer_per_expert(const at::Tensor& a, const at::Tensor& b, const Groups& groups) {
  if (grouped_gemm_applies(a.device())) return at::_grouped_mm(a.t(), b, groups.ends);
  const auto experts = static_cast<std::int64_t>(groups.sizes.size());
  at::Tensor out = at::zeros({experts, a.size(1), b.size(1)}, a.options());
  std::int64_t row = 0;
  for (std::int64_t e = 0; e < experts; row += groups.sizes[static_cast<std::size_t>(e)], ++e) {
    const std::int64_t k = groups.sizes[static_cast<std::size_t>(e)];
    if (k == 0) continue;
    at::Tensor block = out[e];
    at::mm_out(block, a.narrow(0, row, k).t(), b.narrow(0, row, k));
  }
  return out;
}

// Where the weights start in the saved variables (after x, gu, h, sizes and the two stacks).
constexpr std::size_t kFirstWeight = 6;

struct GroupedExperts : public torch::autograd::Function<GroupedExperts> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& rows, at::TensorList weights, const at::Tensor& sizes) {
    const at::ScalarType dtype = compute_dtype(rows);
    const variable_list list(weights.begin(), weights.end());
    const Groups groups = groups_of(sizes, rows.device(), dtype);
    const Stacks w = cast_weights(list, 0, groups.sizes, dtype);
    const at::Tensor x = to_layout(rows, groups, dtype);
    const at::Tensor gu = rows_times(x, w.gate_up.transpose(1, 2), groups), h = swiglu(gu);
    const at::Tensor out = from_layout(rows_times(h, w.down.transpose(1, 2), groups), groups, dtype);
    // h kept for the down weight's gradient: recomputing it costs an exp per element (4% of the
    // layer's backward), keeping it half of gu's bytes (the memory estimate counts it). The 16-bit
    // stacks of fp32 weights are kept too, as autocast keeps its copies of the dense layers'
    // weights for their backward (the estimate's 2 bytes a weight), rather than cast again there;
    // weights already in the compute dtype (gathered by a sharding engine) are stacked again.
    const bool keep_stacks = list.front().scalar_type() != dtype;
    variable_list saved{x, gu, h, sizes, keep_stacks ? w.gate_up : at::Tensor(), keep_stacks ? w.down : at::Tensor()};
    saved.insert(saved.end(), list.begin(), list.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["rows_dtype"] = static_cast<std::int64_t>(rows.scalar_type());
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &gu = saved[1], &h = saved[2];
    const Groups groups = groups_of(saved[3], x.device(), x.scalar_type());
    const auto experts = static_cast<std::int64_t>(groups.sizes.size());
    const Stacks w = saved[4].defined() ? Stacks{saved[4], saved[5]}
                                        : cast_weights(saved, kFirstWeight, groups.sizes, x.scalar_type());
    const at::Tensor dy = to_layout(grads[0], groups, x.scalar_type());
    const at::Tensor dgu = swiglu_backward(rows_times(dy, w.down, groups), gu);
    const auto rows_dtype = static_cast<at::ScalarType>(ctx->saved_data["rows_dtype"].toInt());
    const at::Tensor dx = from_layout(rows_times(dgu, w.gate_up, groups), groups, rows_dtype);
    // The weight gradients, converted to the parameters' dtype once per kind; each a view of them.
    const at::ScalarType param_dtype = saved[kFirstWeight].scalar_type();
    const std::int64_t width = w.down.size(2);
    const at::Tensor dgate_up = outer_per_expert(dgu, x, groups).to(param_dtype),
                     ddown = outer_per_expert(dy, h, groups).to(param_dtype);
    variable_list out(static_cast<std::size_t>(3 * experts + 2));
    out[0] = dx;
    for (std::int64_t e = 0; e < experts; ++e) {
      const auto i = static_cast<std::size_t>(e), stride = static_cast<std::size_t>(experts);
      out[1 + i] = dgate_up[e].narrow(0, 0, width);
      out[1 + stride + i] = dgate_up[e].narrow(0, width, width);
      out[1 + 2 * stride + i] = ddown[e];
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
