// The causal softmax of the blocked attention (blocked_attention.cpp) on bf16 score rows, forward
// and backward, one pass each: the scale, the causal mask, the softmax and the bf16 casts that
// would otherwise be five ATen operations with fp32 intermediates. Compiled once per instruction
// set, like fused_kernels_simd.cpp.
#include "fused_kernels.h"
#include "fused_vec.h"

#include <ATen/Parallel.h>

#include <limits>
#include <vector>

namespace lft::model::kernels::LFT_KERNEL_ISA {
namespace {

// f(row, visible keys, thread's buffers) for each stacked score row, in parallel: row r is query
// position first + r % block_rows and sees keys [0, first + r % block_rows].
template <typename F>
void for_causal_rows(std::int64_t rows, std::int64_t block_rows, std::int64_t first, std::int64_t keys, F f) {
  at::parallel_for(0, rows, 1, [&](std::int64_t r0, std::int64_t r1) {
    std::vector<float> a(static_cast<std::size_t>(keys)), b(static_cast<std::size_t>(keys));
    for (std::int64_t r = r0; r < r1; ++r) f(r, first + r % block_rows + 1, a.data(), b.data());
  });
}

void zero_tail(c10::BFloat16* row, std::int64_t visible, std::int64_t keys) {
  std::fill(row + visible, row + keys, c10::BFloat16(0.f));
}

}  // namespace

void causal_softmax_forward(const c10::BFloat16* scores, c10::BFloat16* p, std::int64_t rows,
                            std::int64_t block_rows, std::int64_t first, std::int64_t keys, float scale) {
  for_causal_rows(rows, block_rows, first, keys, [&](std::int64_t r, std::int64_t visible, float* x, float*) {
    as_float(scores + r * keys, visible, x);
    // Scaled and rounded to bf16, as the formula's bf16 `scores * scale`.
    const Vec vscale(scale);
    Vec vmax(-std::numeric_limits<float>::infinity());
    std::int64_t i = 0;
    for (; i + kLanes <= visible; i += kLanes) {
      const Vec s = round_bf16(Vec::loadu(x + i) * vscale);
      s.store(x + i);
      vmax = at::vec::maximum(vmax, s);
    }
    float m = max_lanes(vmax);
    for (; i < visible; ++i) {
      x[i] = static_cast<float>(c10::BFloat16(x[i] * scale));
      m = std::max(m, x[i]);
    }
    const Vec vm(m);
    Vec acc(0.f);
    for (i = 0; i + kLanes <= visible; i += kLanes) {
      const Vec e = exp_of<c10::BFloat16>(Vec::loadu(x + i) - vm);
      e.store(x + i);
      acc = acc + e;
    }
    float sum = sum_lanes(acc);
    for (; i < visible; ++i) sum += x[i] = std::exp(x[i] - m);
    const Vec inv(1.f / sum);
    for (i = 0; i + kLanes <= visible; i += kLanes) (Vec::loadu(x + i) * inv).store(x + i);
    for (; i < visible; ++i) x[i] /= sum;
    c10::BFloat16* out = p + r * keys;
    store(x, out, visible);
    zero_tail(out, visible, keys);
  });
}

void causal_softmax_backward(const c10::BFloat16* p, const c10::BFloat16* dp, c10::BFloat16* ds,
                             std::int64_t rows, std::int64_t block_rows, std::int64_t first, std::int64_t keys,
                             float scale) {
  for_causal_rows(rows, block_rows, first, keys, [&](std::int64_t r, std::int64_t visible, float* pf, float* gf) {
    as_float(p + r * keys, visible, pf);
    as_float(dp + r * keys, visible, gf);
    Vec acc(0.f);
    std::int64_t i = 0;
    for (; i + kLanes <= visible; i += kLanes) acc = at::vec::fmadd(Vec::loadu(pf + i), Vec::loadu(gf + i), acc);
    float dot = sum_lanes(acc);
    for (; i < visible; ++i) dot += pf[i] * gf[i];
    // softmax's gradient p * (dp - <p, dp>), rounded to bf16 (the scores' dtype), then times the
    // scale in bf16, as autograd takes the formula back.
    const Vec vdot(dot), vscale(scale);
    for (i = 0; i + kLanes <= visible; i += kLanes)
      (round_bf16(Vec::loadu(pf + i) * (Vec::loadu(gf + i) - vdot)) * vscale).store(gf + i);
    for (; i < visible; ++i) gf[i] = static_cast<float>(c10::BFloat16(pf[i] * (gf[i] - dot))) * scale;
    c10::BFloat16* out = ds + r * keys;
    store(gf, out, visible);
    zero_tail(out, visible, keys);
  });
}

}  // namespace lft::model::kernels::LFT_KERNEL_ISA
