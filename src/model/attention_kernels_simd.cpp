// The causal softmax of the blocked attention (blocked_attention.cpp) on score rows of bf16 or
// fp32, forward and backward: the scale, the causal mask, the softmax and the casts that would
// otherwise be five ATen operations with fp32 intermediates. Compiled once per instruction
// set, like fused_kernels_simd.cpp.
#include "fused_kernels.h"
#include "fused_vec.h"

#include <ATen/Parallel.h>

#include <limits>
#include <tuple>
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

template <typename T>
void zero_tail(T* row, std::int64_t visible, std::int64_t keys) {
  std::fill(row + visible, row + keys, T(0.f));
}

// kPair values of T as two Vecs of floats, and back (bf16 rounded to nearest even).
constexpr std::int64_t kPair = VecB::size();
inline std::tuple<Vec, Vec> load_pair(const c10::BFloat16* p) { return at::vec::convert_bfloat16_float(VecB::loadu(p)); }
inline std::tuple<Vec, Vec> load_pair(const float* p) { return {Vec::loadu(p), Vec::loadu(p + kLanes)}; }
inline void store_pair(c10::BFloat16* p, const Vec& a, const Vec& b) { at::vec::convert_float_bfloat16(a, b).store(p); }
inline void store_pair(float* p, const Vec& a, const Vec& b) {
  a.store(p);
  b.store(p + kLanes);
}
}  // namespace

// Three passes over a row: the scores scaled (rounded to T, as the formula's `scores * scale` in
// T) and their maximum; exp and sum in place; the normalized row stored as T.
template <typename T>
void causal_softmax_forward(const T* scores, T* p, std::int64_t rows, std::int64_t block_rows, std::int64_t first,
                            std::int64_t keys, float scale) {
  for_causal_rows(rows, block_rows, first, keys, [&](std::int64_t r, std::int64_t visible, float* x) {
    const T* in = scores + r * keys;
    const Vec vscale(scale);
    Vec vmax(-std::numeric_limits<float>::infinity());
    std::int64_t i = 0;
    for (; i + kPair <= visible; i += kPair) {
      const auto [lo, hi] = load_pair(in + i);
      const Vec a = as_stored<T>(lo * vscale), b = as_stored<T>(hi * vscale);
      a.store(x + i);
      b.store(x + i + kLanes);
      vmax = at::vec::maximum(vmax, at::vec::maximum(a, b));
    }
    float m = max_lanes(vmax);
    for (; i < visible; ++i) {
      x[i] = as_stored<T>(static_cast<float>(in[i]) * scale);
      m = std::max(m, x[i]);
    }
    const Vec vm(m);
    Vec acc(0.f);
    for (i = 0; i + kLanes <= visible; i += kLanes) {
      const Vec e = exp_of<T>(Vec::loadu(x + i) - vm);
      e.store(x + i);
      acc = acc + e;
    }
    float sum = sum_lanes(acc);
    for (; i < visible; ++i) sum += x[i] = std::exp(x[i] - m);
    const float inv = 1.f / sum;
    const Vec vinv(inv);
    T* out = p + r * keys;
    for (i = 0; i + kPair <= visible; i += kPair)
      store_pair(out + i, Vec::loadu(x + i) * vinv, Vec::loadu(x + i + kLanes) * vinv);
    for (; i < visible; ++i) out[i] = T(x[i] * inv);
    zero_tail(out, visible, keys);
  });
}

// Two passes over a row, straight from p and dp: <p, dp>, then the gradient.
template <typename T>
void causal_softmax_backward(const T* p, const T* dp, T* ds, std::int64_t rows, std::int64_t block_rows,
                             std::int64_t first, std::int64_t keys, float scale) {
  for_causal_rows(rows, block_rows, first, keys, [&](std::int64_t r, std::int64_t visible, float*) {
    const T *pr = p + r * keys, *gr = dp + r * keys;
    Vec acc(0.f);
    std::int64_t i = 0;
    for (; i + kPair <= visible; i += kPair) {
      const auto [p0, p1] = load_pair(pr + i);
      const auto [g0, g1] = load_pair(gr + i);
      acc = at::vec::fmadd(p1, g1, at::vec::fmadd(p0, g0, acc));
    }
    float dot = sum_lanes(acc);
    for (; i < visible; ++i) dot += static_cast<float>(pr[i]) * static_cast<float>(gr[i]);
    // softmax's gradient p * (dp - <p, dp>), rounded to T (the scores' dtype), then times the
    // scale in T, as autograd takes the formula back.
    const Vec vdot(dot), vscale(scale);
    T* out = ds + r * keys;
    for (i = 0; i + kPair <= visible; i += kPair) {
      const auto [p0, p1] = load_pair(pr + i);
      const auto [g0, g1] = load_pair(gr + i);
      store_pair(out + i, as_stored<T>(p0 * (g0 - vdot)) * vscale, as_stored<T>(p1 * (g1 - vdot)) * vscale);
    }
    for (; i < visible; ++i) {
      const float d = static_cast<float>(pr[i]) * (static_cast<float>(gr[i]) - dot);
      out[i] = T(as_stored<T>(d) * scale);
    }
    zero_tail(out, visible, keys);
  });
}

template void causal_softmax_forward<float>(const float*, float*, std::int64_t, std::int64_t, std::int64_t,
                                            std::int64_t, float);
template void causal_softmax_forward<c10::BFloat16>(const c10::BFloat16*, c10::BFloat16*, std::int64_t,
                                                    std::int64_t, std::int64_t, std::int64_t, float);
template void causal_softmax_backward<float>(const float*, const float*, float*, std::int64_t, std::int64_t,
                                             std::int64_t, std::int64_t, float);
template void causal_softmax_backward<c10::BFloat16>(const c10::BFloat16*, const c10::BFloat16*, c10::BFloat16*,
                                                     std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                                     float);

}  // namespace lft::model::kernels::LFT_KERNEL_ISA
