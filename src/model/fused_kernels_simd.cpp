// The fused kernels (fused_kernels_api.h), compiled once per instruction set into namespace
// LFT_KERNEL_ISA (CMakeLists.txt): avx2 (-mavx2 -mfma, CPU_CAPABILITY=AVX2: ATen's Vectorized<float>
// is 8 lanes) and avx512 (16 lanes); exp() is Sleef's, which LibTorch exports.
#include "fused_kernels.h"
#include "fused_vec.h"

#include <ATen/Parallel.h>

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

namespace lft::model::kernels::LFT_KERNEL_ISA {
namespace {

// Elementwise `f(i0, n)` over [0, total) in blocks, in parallel.
template <typename F>
void for_blocks(std::int64_t total, F f) {
  at::parallel_for(0, (total + kBlock - 1) / kBlock, 16, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t blk = b0; blk < b1; ++blk) {
      const std::int64_t i0 = blk * kBlock;
      f(i0, std::min(kBlock, total - i0));
    }
  });
}

}  // namespace

// ---- RMSNorm ----
// For bfloat16 x the arithmetic is the formula's (layers.cpp) under autograd: x * rstd in fp32,
// rounded to bfloat16, times the fp32 weight (y in fp32); backward rounds dy * w to bfloat16 as
// autograd does where that product meets the rounded value, and dx comes back in bfloat16.

template <typename T>
void rmsnorm_forward(const T* x, const float* w, float* y, float* rstd, std::int64_t rows, std::int64_t n,
                     float eps) {
  at::parallel_for(0, rows, 1, [&](std::int64_t r0, std::int64_t r1) {
    std::vector<float> buf;
    for (std::int64_t r = r0; r < r1; ++r) {
      const float* xr = row_as_float(x + r * n, n, buf);
      float* yr = y + r * n;
      Vec acc(0.f);
      std::int64_t i = 0;
      for (; i + kLanes <= n; i += kLanes) {
        const Vec v = Vec::loadu(xr + i);
        acc = at::vec::fmadd(v, v, acc);
      }
      float ss = sum_lanes(acc);
      for (; i < n; ++i) ss += xr[i] * xr[i];
      const float rs = 1.f / std::sqrt(ss / static_cast<float>(n) + eps);
      rstd[r] = rs;
      const Vec vrs(rs);
      for (i = 0; i + kLanes <= n; i += kLanes)
        (as_stored<T>(Vec::loadu(xr + i) * vrs) * Vec::loadu(w + i)).store(yr + i);
      for (; i < n; ++i) yr[i] = static_cast<float>(static_cast<T>(xr[i] * rs)) * w[i];
    }
  });
}

template <typename T>
void rmsnorm_backward(const float* dy, const T* x, const float* w, const float* rstd, T* dx, float* dw,
                      std::int64_t rows, std::int64_t n) {
  // Each thread sums its rows' share of dw; the partial sums are added at the end.
  const int threads = at::get_num_threads();
  std::vector<float> partial(static_cast<std::size_t>(threads * n), 0.f);
  at::parallel_for(0, rows, 1, [&](std::int64_t r0, std::int64_t r1) {
    float* dwp = partial.data() + static_cast<std::int64_t>(at::get_thread_num()) * n;
    std::vector<float> xbuf, dxbuf(static_cast<std::size_t>(n));
    for (std::int64_t r = r0; r < r1; ++r) {
      const float *xr = row_as_float(x + r * n, n, xbuf), *gr = dy + r * n;
      float* dxr = out_buffer(dx + r * n, dxbuf.data());
      const float rs = rstd[r];
      Vec acc(0.f);
      std::int64_t i = 0;
      for (; i + kLanes <= n; i += kLanes)
        acc = at::vec::fmadd(as_stored<T>(Vec::loadu(gr + i) * Vec::loadu(w + i)), Vec::loadu(xr + i), acc);
      float c = sum_lanes(acc);
      for (; i < n; ++i) c += static_cast<float>(static_cast<T>(gr[i] * w[i])) * xr[i];
      // d/dx of x * rs: rs * gw - x * rs^3 * mean(gw * x)
      const float k = rs * rs * rs * c / static_cast<float>(n);
      const Vec vrs(rs), vk(k);
      for (i = 0; i + kLanes <= n; i += kLanes) {
        const Vec xv = Vec::loadu(xr + i), gv = Vec::loadu(gr + i);
        (vrs * as_stored<T>(gv * Vec::loadu(w + i)) - xv * vk).store(dxr + i);
        at::vec::fmadd(gv, as_stored<T>(xv * vrs), Vec::loadu(dwp + i)).store(dwp + i);
      }
      for (; i < n; ++i) {
        dxr[i] = rs * static_cast<float>(static_cast<T>(gr[i] * w[i])) - xr[i] * k;
        dwp[i] += gr[i] * static_cast<float>(static_cast<T>(xr[i] * rs));
      }
      store(dxr, dx + r * n, n);
    }
  });
  for (int th = 0; th < threads; ++th)
    for (std::int64_t i = 0; i < n; ++i) dw[i] += partial[static_cast<std::size_t>(th * n + i)];
}

// ---- SwiGLU ----

namespace {

// h = silu(g) * u over m <= kBlock elements.
template <typename T>
void swiglu_block(const T* g, const T* u, T* h, std::int64_t m) {
  float gb[kBlock], ub[kBlock], hb[kBlock];
  const float* gf = as_float(g, m, gb);
  const float* uf = as_float(u, m, ub);
  float* hf = out_buffer(h, hb);
  std::int64_t i = 0;
  for (; i + kLanes <= m; i += kLanes) {
    const Vec gv = Vec::loadu(gf + i);
    (gv * sigmoid<T>(gv) * Vec::loadu(uf + i)).store(hf + i);
  }
  for (; i < m; ++i) hf[i] = gf[i] * sigmoid(gf[i]) * uf[i];
  store(hf, h, m);
}

// (dg, du) over m <= kBlock elements.
template <typename T>
void swiglu_backward_block(const T* dh, const T* g, const T* u, T* dg, T* du, std::int64_t m) {
  float hb[kBlock], gb[kBlock], ub[kBlock], dgb[kBlock], dub[kBlock];
  const float* hf = as_float(dh, m, hb);
  const float* gf = as_float(g, m, gb);
  const float* uf = as_float(u, m, ub);
  float* dgf = out_buffer(dg, dgb);
  float* duf = out_buffer(du, dub);
  std::int64_t i = 0;
  for (; i + kLanes <= m; i += kLanes) {
    const Vec gv = Vec::loadu(gf + i), hv = Vec::loadu(hf + i), s = sigmoid<T>(gv);
    (hv * gv * s).store(duf + i);
    // d silu(g) / dg = s * (1 + g * (1 - s))
    (hv * Vec::loadu(uf + i) * s * (Vec(1.f) + gv * (Vec(1.f) - s))).store(dgf + i);
  }
  for (; i < m; ++i) {
    const float s = sigmoid(gf[i]);
    duf[i] = hf[i] * gf[i] * s;
    dgf[i] = hf[i] * uf[i] * s * (1.f + gf[i] * (1.f - s));
  }
  store(dgf, dg, m);
  store(duf, du, m);
}

// `f(row, i0, m)` over the blocks of `rows` rows of `width`, in parallel by rows.
template <typename F>
void for_row_blocks(std::int64_t rows, std::int64_t width, F f) {
  const std::int64_t grain = std::max<std::int64_t>(1, 16 * kBlock / std::max<std::int64_t>(width, 1));
  at::parallel_for(0, rows, grain, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r)
      for (std::int64_t i0 = 0; i0 < width; i0 += kBlock) f(r, i0, std::min(kBlock, width - i0));
  });
}

}  // namespace

template <typename T>
void swiglu_forward(const T* g, const T* u, T* h, std::int64_t n) {
  for_blocks(n, [&](std::int64_t i0, std::int64_t m) { swiglu_block(g + i0, u + i0, h + i0, m); });
}

template <typename T>
void swiglu_backward(const T* dh, const T* g, const T* u, T* dg, T* du, std::int64_t n) {
  for_blocks(n, [&](std::int64_t i0, std::int64_t m) {
    swiglu_backward_block(dh + i0, g + i0, u + i0, dg + i0, du + i0, m);
  });
}

template <typename T>
void swiglu_forward_paired(const T* gu, T* h, std::int64_t rows, std::int64_t width) {
  for_row_blocks(rows, width, [&](std::int64_t r, std::int64_t i0, std::int64_t m) {
    const T* g = gu + r * 2 * width + i0;
    swiglu_block(g, g + width, h + r * width + i0, m);
  });
}

template <typename T>
void swiglu_backward_paired(const T* dh, const T* gu, T* dgu, std::int64_t rows, std::int64_t width) {
  for_row_blocks(rows, width, [&](std::int64_t r, std::int64_t i0, std::int64_t m) {
    const T* g = gu + r * 2 * width + i0;
    T* dg = dgu + r * 2 * width + i0;
    swiglu_backward_block(dh + r * width + i0, g, g + width, dg, dg + width, m);
  });
}

// ---- rotary ----
// y1 = x1 c - x2 s, y2 = x2 c + x1 s over the two halves (cos and sin repeat over the halves).
// Backward: dx1 = dy1 c + dy2 s, dx2 = dy2 c - dy1 s.

namespace {

// f(row offset, cos row, sin row) for each [d] row of a [b, t, heads, d] tensor, in parallel over
// the b * t positions.
template <typename F>
void for_rotary_rows(std::int64_t b, std::int64_t t, std::int64_t heads, std::int64_t d, const float* cos,
                     const float* sin, F f) {
  at::parallel_for(0, b * t, 1, [&](std::int64_t p0, std::int64_t p1) {
    for (std::int64_t p = p0; p < p1; ++p)
      for (std::int64_t h = 0; h < heads; ++h) f((p * heads + h) * d, cos + (p % t) * d, sin + (p % t) * d);
  });
}

}  // namespace

template <typename T>
void rotary_forward(const T* x, const float* cos, const float* sin, float* y, std::int64_t b,
                    std::int64_t t, std::int64_t heads, std::int64_t d) {
  const std::int64_t half = d / 2;
  for_rotary_rows(b, t, heads, d, cos, sin, [&](std::int64_t row, const float* c, const float* s) {
    float xb[kBlock];
    const float* xf = as_float(x + row, d, xb);
    float* yr = y + row;
    for (std::int64_t i = 0; i < half; ++i) {
      yr[i] = xf[i] * c[i] - xf[i + half] * s[i];
      yr[i + half] = xf[i + half] * c[i + half] + xf[i] * s[i + half];
    }
  });
}

template <typename T>
void rotary_backward(const float* dy, const float* cos, const float* sin, T* dx, std::int64_t b,
                     std::int64_t t, std::int64_t heads, std::int64_t d) {
  const std::int64_t half = d / 2;
  for_rotary_rows(b, t, heads, d, cos, sin, [&](std::int64_t row, const float* c, const float* s) {
    float db[kBlock];
    const float* g = dy + row;
    float* o = out_buffer(dx + row, db);
    for (std::int64_t i = 0; i < half; ++i) {
      o[i] = g[i] * c[i] + g[i + half] * s[i + half];
      o[i + half] = g[i + half] * c[i + half] - g[i] * s[i];
    }
    store(o, dx + row, d);
  });
}

// ---- cross-entropy ----

namespace {

// logsumexp of a row of v floats that came as T.
template <typename T>
float row_logsumexp(const float* x, std::int64_t v) {
  Vec vm(-std::numeric_limits<float>::infinity());
  std::int64_t i = 0;
  for (; i + kLanes <= v; i += kLanes) vm = at::vec::maximum(vm, Vec::loadu(x + i));
  float m = max_lanes(vm);
  for (; i < v; ++i) m = std::max(m, x[i]);
  if (std::isinf(m)) return m;
  const Vec vmax(m);
  Vec acc(0.f);
  for (i = 0; i + kLanes <= v; i += kLanes) acc = acc + exp_of<T>(Vec::loadu(x + i) - vmax);
  float s = sum_lanes(acc);
  for (; i < v; ++i) s += std::exp(x[i] - m);
  return m + std::log(s);
}

}  // namespace

template <typename T>
std::int64_t cross_entropy_forward(const T* logits, const std::int64_t* ids, float* loss, float* lse,
                                   std::int64_t b, std::int64_t t, std::int64_t v,
                                   std::int64_t ignore_id) {
  std::atomic<std::int64_t> bad{-1};
  at::parallel_for(0, b * (t - 1), 1, [&](std::int64_t r0, std::int64_t r1) {
    std::vector<float> buf;
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::int64_t i = r / (t - 1), j = r % (t - 1);
      const std::int64_t target = ids[i * t + j + 1];
      if (target == ignore_id) {
        loss[r] = 0.f;
        lse[r] = 0.f;
        continue;
      }
      if (target < 0 || target >= v) {
        bad = target;  // any one of them: the caller reports it
        loss[r] = lse[r] = 0.f;
        continue;
      }
      const float* x = row_as_float(logits + (i * t + j) * v, v, buf);
      lse[r] = row_logsumexp<T>(x, v);
      loss[r] = lse[r] - x[target];
    }
  });
  return bad.load();
}

template <typename T>
void cross_entropy_backward(const float* grad, const T* logits, const std::int64_t* ids,
                            const float* lse, T* dlogits, std::int64_t b, std::int64_t t,
                            std::int64_t v, std::int64_t ignore_id) {
  at::parallel_for(0, b * t, 1, [&](std::int64_t r0, std::int64_t r1) {
    std::vector<float> buf, out(static_cast<std::size_t>(v));
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::int64_t i = r / t, j = r % t;
      T* dr = dlogits + r * v;
      const std::int64_t target = j + 1 < t ? ids[i * t + j + 1] : ignore_id;
      const std::int64_t k = i * (t - 1) + j;
      if (target == ignore_id || grad[k] == 0.f) {
        std::fill(dr, dr + v, T(0));
        continue;
      }
      const float* x = row_as_float(logits + r * v, v, buf);
      float* o = out_buffer(dr, out.data());
      const Vec vg(grad[k]), vl(lse[k]);
      std::int64_t e = 0;
      for (; e + kLanes <= v; e += kLanes) (vg * exp_of<T>(Vec::loadu(x + e) - vl)).store(o + e);
      for (; e < v; ++e) o[e] = grad[k] * std::exp(x[e] - lse[k]);
      o[target] -= grad[k];
      store(o, dr, v);
    }
  });
}

// ---- rows moved between layouts ----

template <typename S, typename D>
void gather_rows(const S* src, const std::int64_t* rows, D* dst, std::int64_t n, std::int64_t width) {
  at::parallel_for(0, n, 16, [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) {
      D* out = dst + i * width;
      if (rows[i] < 0) {
        std::fill(out, out + width, D(0.f));
        continue;
      }
      const S* in = src + rows[i] * width;
      if constexpr (std::is_same_v<S, D>) {
        std::copy(in, in + width, out);
      } else if constexpr (std::is_same_v<D, float>) {
        as_float(in, width, out);
      } else {
        store(in, out, width);
      }
    }
  });
}

template void gather_rows<float, float>(const float*, const std::int64_t*, float*, std::int64_t, std::int64_t);
template void gather_rows<float, c10::BFloat16>(const float*, const std::int64_t*, c10::BFloat16*, std::int64_t,
                                                std::int64_t);
template void gather_rows<c10::BFloat16, float>(const c10::BFloat16*, const std::int64_t*, float*, std::int64_t,
                                                std::int64_t);
template void gather_rows<c10::BFloat16, c10::BFloat16>(const c10::BFloat16*, const std::int64_t*, c10::BFloat16*,
                                                        std::int64_t, std::int64_t);

// ---- routed rows back to their tokens ----

namespace {

Vec rounded_if(bool bf16, const Vec& v) { return bf16 ? round_bf16(v) : v; }
float rounded_if(bool bf16, float v) { return bf16 ? static_cast<float>(c10::BFloat16(v)) : v; }

}  // namespace

template <typename T>
void combine_rows_forward(const T* out, const float* w, const std::int64_t* starts, const std::int64_t* rows,
                          float* y, std::int64_t tokens, std::int64_t width, bool bf16_products) {
  at::parallel_for(0, tokens, 16, [&](std::int64_t t0, std::int64_t t1) {
    std::vector<float> buf(static_cast<std::size_t>(width));
    for (std::int64_t t = t0; t < t1; ++t) {
      float* yt = y + t * width;
      std::fill(yt, yt + width, 0.f);
      for (std::int64_t j = starts[t]; j < starts[t + 1]; ++j) {
        const std::int64_t r = rows[j];
        const float* o = as_float(out + r * width, width, buf.data());
        const Vec vw(w[r]);
        std::int64_t i = 0;
        for (; i + kLanes <= width; i += kLanes)
          (Vec::loadu(yt + i) + rounded_if(bf16_products, Vec::loadu(o + i) * vw)).store(yt + i);
        for (; i < width; ++i) yt[i] += rounded_if(bf16_products, o[i] * w[r]);
      }
    }
  });
}

template <typename T>
void combine_rows_backward(const float* g, const T* out, const float* w, const std::int64_t* token_of, T* dout,
                           float* dw, std::int64_t rows, std::int64_t width, bool bf16_products) {
  at::parallel_for(0, rows, 16, [&](std::int64_t r0, std::int64_t r1) {
    std::vector<float> obuf(static_cast<std::size_t>(width)), dbuf(static_cast<std::size_t>(width));
    for (std::int64_t r = r0; r < r1; ++r) {
      const float* gt = g + token_of[r] * width;
      const float* o = as_float(out + r * width, width, obuf.data());
      float* d = out_buffer(dout + r * width, dbuf.data());
      const Vec vw(w[r]);
      Vec acc(0.f);
      std::int64_t i = 0;
      for (; i + kLanes <= width; i += kLanes) {
        const Vec gv = rounded_if(bf16_products, Vec::loadu(gt + i));
        (gv * vw).store(d + i);
        acc = at::vec::fmadd(gv, Vec::loadu(o + i), acc);
      }
      float dot = sum_lanes(acc);
      for (; i < width; ++i) {
        const float gi = rounded_if(bf16_products, gt[i]);
        d[i] = gi * w[r];
        dot += gi * o[i];
      }
      dw[r] = dot;
      store(d, dout + r * width, width);
    }
  });
}

// ---- sum of squares, in double ----

double sum_squares(const float* x, std::int64_t n) {
  constexpr std::int64_t kChunk = 1 << 16;
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<std::size_t>(chunks), 0.0);
  at::parallel_for(0, chunks, 1, [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t c = c0; c < c1; ++c) {
      const std::int64_t begin = c * kChunk, end = std::min(n, begin + kChunk);
      __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
      std::int64_t i = begin;
      for (; i + 8 <= end; i += 8) {
        const __m256d lo = _mm256_cvtps_pd(_mm_loadu_ps(x + i)), hi = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
        acc0 = _mm256_fmadd_pd(lo, lo, acc0);
        acc1 = _mm256_fmadd_pd(hi, hi, acc1);
      }
      double lanes[4];
      _mm256_storeu_pd(lanes, _mm256_add_pd(acc0, acc1));
      double s = lanes[0] + lanes[1] + lanes[2] + lanes[3];
      for (; i < end; ++i) s += static_cast<double>(x[i]) * x[i];
      partial[static_cast<std::size_t>(c)] = s;
    }
  });
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

#define LFT_FUSED_INSTANTIATE(T)                                                                   \
  template void rmsnorm_forward<T>(const T*, const float*, float*, float*, std::int64_t, std::int64_t, \
                                   float);                                                         \
  template void rmsnorm_backward<T>(const float*, const T*, const float*, const float*, T*, float*, \
                                    std::int64_t, std::int64_t);                                  \
  template void swiglu_forward<T>(const T*, const T*, T*, std::int64_t);                           \
  template void swiglu_backward<T>(const T*, const T*, const T*, T*, T*, std::int64_t);            \
  template void swiglu_forward_paired<T>(const T*, T*, std::int64_t, std::int64_t);                 \
  template void swiglu_backward_paired<T>(const T*, const T*, T*, std::int64_t, std::int64_t);      \
  template void rotary_forward<T>(const T*, const float*, const float*, float*, std::int64_t,      \
                                  std::int64_t, std::int64_t, std::int64_t);                       \
  template void rotary_backward<T>(const float*, const float*, const float*, T*, std::int64_t,     \
                                   std::int64_t, std::int64_t, std::int64_t);                      \
  template std::int64_t cross_entropy_forward<T>(const T*, const std::int64_t*, float*, float*,    \
                                                 std::int64_t, std::int64_t, std::int64_t,         \
                                                 std::int64_t);                                    \
  template void cross_entropy_backward<T>(const float*, const T*, const std::int64_t*,             \
                                          const float*, T*, std::int64_t, std::int64_t,            \
                                          std::int64_t, std::int64_t);                             \
  template void combine_rows_forward<T>(const T*, const float*, const std::int64_t*, const std::int64_t*, \
                                        float*, std::int64_t, std::int64_t, bool);                 \
  template void combine_rows_backward<T>(const float*, const T*, const float*, const std::int64_t*, T*, \
                                         float*, std::int64_t, std::int64_t, bool);
LFT_FUSED_INSTANTIATE(float)
LFT_FUSED_INSTANTIATE(c10::BFloat16)
#undef LFT_FUSED_INSTANTIATE

}  // namespace lft::model::kernels::LFT_KERNEL_ISA
