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

// f(row, visible keys, thread's buffer of `keys` floats) for each stacked score row, in parallel:
// row r is query position first + r % block_rows and sees keys [0, first + r % block_rows].
template <typename F>
void for_causal_rows(std::int64_t rows, std::int64_t block_rows, std::int64_t first, std::int64_t keys, F f) {
  at::parallel_for(0, rows, 1, [&](std::int64_t r0, std::int64_t r1) {
    std::vector<float> buf(static_cast<std::size_t>(keys));
    for (std::int64_t r = r0; r < r1; ++r) f(r, first + r % block_rows + 1, buf.data());
  });
}

void zero_tail(c10::BFloat16* row, std::int64_t visible, std::int64_t keys) {
  std::fill(row + visible, row + keys, c10::BFloat16(0.f));
}

constexpr std::int64_t kPair = VecB::size();  // bf16 lanes: two Vecs of floats

}  // namespace

// Three passes over a row: the bf16 scores scaled, rounded and their maximum; exp and sum in
// place; the normalized row stored as bf16.
void causal_softmax_forward(const c10::BFloat16* scores, c10::BFloat16* p, std::int64_t rows,
                            std::int64_t block_rows, std::int64_t first, std::int64_t keys, float scale) {
  for_causal_rows(rows, block_rows, first, keys, [&](std::int64_t r, std::int64_t visible, float* x) {
    const c10::BFloat16* in = scores + r * keys;
    // Scaled and rounded to bf16, as the formula's bf16 `scores * scale`.
    const Vec vscale(scale);
    Vec vmax(-std::numeric_limits<float>::infinity());
    std::int64_t i = 0;
    for (; i + kPair <= visible; i += kPair) {
      const auto [lo, hi] = at::vec::convert_bfloat16_float(VecB::loadu(in + i));
      const Vec a = round_bf16(lo * vscale), b = round_bf16(hi * vscale);
      a.store(x + i);
      b.store(x + i + kLanes);
      vmax = at::vec::maximum(vmax, at::vec::maximum(a, b));
    }
    float m = max_lanes(vmax);
    for (; i < visible; ++i) {
      x[i] = static_cast<float>(c10::BFloat16(static_cast<float>(in[i]) * scale));
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
    const float inv = 1.f / sum;
    const Vec vinv(inv);
    c10::BFloat16* out = p + r * keys;
    for (i = 0; i + kPair <= visible; i += kPair)
      at::vec::convert_float_bfloat16(Vec::loadu(x + i) * vinv, Vec::loadu(x + i + kLanes) * vinv).store(out + i);
    for (; i < visible; ++i) out[i] = c10::BFloat16(x[i] * inv);
    zero_tail(out, visible, keys);
  });
}

// Two passes over a row, straight from the bf16 p and dp: <p, dp>, then the gradient.
void causal_softmax_backward(const c10::BFloat16* p, const c10::BFloat16* dp, c10::BFloat16* ds,
                             std::int64_t rows, std::int64_t block_rows, std::int64_t first, std::int64_t keys,
                             float scale) {
  for_causal_rows(rows, block_rows, first, keys, [&](std::int64_t r, std::int64_t visible, float*) {
    const c10::BFloat16 *pr = p + r * keys, *gr = dp + r * keys;
    Vec acc(0.f);
    std::int64_t i = 0;
    for (; i + kPair <= visible; i += kPair) {
      const auto [p0, p1] = at::vec::convert_bfloat16_float(VecB::loadu(pr + i));
      const auto [g0, g1] = at::vec::convert_bfloat16_float(VecB::loadu(gr + i));
      acc = at::vec::fmadd(p1, g1, at::vec::fmadd(p0, g0, acc));
    }
    float dot = sum_lanes(acc);
    for (; i < visible; ++i) dot += static_cast<float>(pr[i]) * static_cast<float>(gr[i]);
    // softmax's gradient p * (dp - <p, dp>), rounded to bf16 (the scores' dtype), then times the
    // scale in bf16, as autograd takes the formula back.
    const Vec vdot(dot), vscale(scale);
    c10::BFloat16* out = ds + r * keys;
    for (i = 0; i + kPair <= visible; i += kPair) {
      const auto [p0, p1] = at::vec::convert_bfloat16_float(VecB::loadu(pr + i));
      const auto [g0, g1] = at::vec::convert_bfloat16_float(VecB::loadu(gr + i));
      at::vec::convert_float_bfloat16(round_bf16(p0 * (g0 - vdot)) * vscale, round_bf16(p1 * (g1 - vdot)) * vscale)
          .store(out + i);
    }
    for (; i < visible; ++i) {
      const float d = static_cast<float>(pr[i]) * (static_cast<float>(gr[i]) - dot);
      out[i] = c10::BFloat16(static_cast<float>(c10::BFloat16(d)) * scale);
    }
    zero_tail(out, visible, keys);
  });
}

}  // namespace lft::model::kernels::LFT_KERNEL_ISA
