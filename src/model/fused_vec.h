// Lane helpers of the fused CPU kernels, for the translation units compiled per instruction set
// (fused_kernels_simd.cpp, attention_kernels_simd.cpp): ATen's Vectorized<float> is 8 lanes in the
// AVX2 build, 16 in the AVX-512 one. Internal linkage: each unit gets its own copy, built with its
// own flags.
#pragma once

#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/util/BFloat16.h>

#if defined(CPU_CAPABILITY_AVX2) || defined(CPU_CAPABILITY_AVX512)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <vector>

namespace lft::model::kernels {
namespace {

using Vec = at::vec::Vectorized<float>;
constexpr std::int64_t kLanes = Vec::size();
constexpr std::int64_t kBlock = 512;  // elements converted at a time for bfloat16 (stack buffers)

inline float sum_lanes(const Vec& v) {
  float lanes[kLanes];
  v.store(lanes);
  float s = 0;
  for (float x : lanes) s += x;
  return s;
}

inline float max_lanes(const Vec& v) {
  float lanes[kLanes];
  v.store(lanes);
  float m = lanes[0];
  for (float x : lanes) m = std::max(m, x);
  return m;
}

// exp for values that came as T: Sleef's 1-ulp exp for fp32; for bfloat16 ATen's 20-ulp exp_u20
// (relative error 2.4e-6, far below bfloat16's 3.9e-3), 1.6x faster on the cross-entropy here.
template <typename T>
inline Vec exp_of(const Vec& x) {
  if constexpr (std::is_same_v<T, c10::BFloat16>) return x.exp_u20();
  else return x.exp();
}

template <typename T>
inline Vec sigmoid(const Vec& g) { return Vec(1.f) / (Vec(1.f) + exp_of<T>(g.neg())); }
inline float sigmoid(float g) { return 1.f / (1.f + std::exp(-g)); }

// n elements of T as floats: a copy in buf for bfloat16, the pointer itself for float.
inline const float* as_float(const float* p, std::int64_t, float*) { return p; }
using VecB = at::vec::Vectorized<c10::BFloat16>;  // 16 lanes: two Vecs of floats
inline const float* as_float(const c10::BFloat16* p, std::int64_t n, float* buf) {
  std::int64_t i = 0;
  for (; i + VecB::size() <= n; i += VecB::size()) {
    const auto [lo, hi] = at::vec::convert_bfloat16_float(VecB::loadu(p + i));
    lo.store(buf + i);
    hi.store(buf + i + kLanes);
  }
  for (; i < n; ++i) buf[i] = static_cast<float>(p[i]);
  return buf;
}
inline void store(const float* src, float* dst, std::int64_t n) {
  if (src != dst) std::copy(src, src + n, dst);
}
// Rounded to nearest even, as c10::BFloat16(float).
inline void store(const float* src, c10::BFloat16* dst, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + VecB::size() <= n; i += VecB::size())
    at::vec::convert_float_bfloat16(Vec::loadu(src + i), Vec::loadu(src + i + kLanes)).store(dst + i);
  for (; i < n; ++i) dst[i] = c10::BFloat16(src[i]);
}
template <typename T>
inline float* out_buffer(T* p, float* buf) {
  if constexpr (std::is_same_v<T, float>) return p;
  else return buf;
}

// v rounded to bfloat16 (to nearest even, as c10::BFloat16(float)) and back, in the float lanes:
// add 0x7fff plus the kept part's lowest bit, clear the low half; NaN stays NaN. (ATen's
// conversion packs to 16 bits and unpacks again: twice the instructions.)
inline Vec round_bf16(const Vec& v) {
#if defined(CPU_CAPABILITY_AVX512)
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i lowest = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_and_si512(
      _mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)), lowest), _mm512_set1_epi32(-65536));
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_castsi512_ps(rounded), v);
#elif defined(CPU_CAPABILITY_AVX2)
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i lowest = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_and_si256(
      _mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7fff)), lowest), _mm256_set1_epi32(-65536));
  return _mm256_blendv_ps(_mm256_castsi256_ps(rounded), v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
#else
  return std::get<0>(at::vec::convert_bfloat16_float(at::vec::convert_float_bfloat16(v, v)));
#endif
}

template <typename T>
inline Vec as_stored(const Vec& v) {
  if constexpr (std::is_same_v<T, c10::BFloat16>) return round_bf16(v);
  else return v;
}
template <typename T>
inline float as_stored(float x) {
  return static_cast<float>(T(x));
}

// A row of n values of T as floats: the row itself, or a converted copy in `buf`.
inline const float* row_as_float(const float* p, std::int64_t, std::vector<float>&) { return p; }
inline const float* row_as_float(const c10::BFloat16* p, std::int64_t n, std::vector<float>& buf) {
  buf.resize(static_cast<std::size_t>(n));
  return as_float(p, n, buf.data());
}

}  // namespace
}  // namespace lft::model::kernels
