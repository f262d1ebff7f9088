// The CPU kernels behind model/fused.h. Their sources (fused_kernels_simd.cpp,
// attention_kernels_simd.cpp) are compiled twice (CMakeLists.txt): for AVX2 + FMA into namespace
// avx2 and for AVX-512 (F, BW, VL, DQ) into namespace avx512, through ATen's vectorized types (8 or
// 16 lanes, Sleef's exp). Call them as LFT_KERNEL(name)(...): the AVX-512 build where the CPU has it
// (kernel_isa()), else the AVX2 one; only when fused_kernels_supported() says the CPU has AVX2 + FMA.
#pragma once

#include <c10/core/ScalarType.h>
#include <c10/util/BFloat16.h>

#include <cstdint>

namespace lft::model::kernels {

namespace avx2 {
#include "fused_kernels_api.h"
}  // namespace avx2

namespace avx512 {
#include "fused_kernels_api.h"
}  // namespace avx512

// f(float{}) for fp32, f(c10::BFloat16{}) otherwise: the kernels' element type from a tensor's
// dtype (callers have checked it is one of the two).
template <typename F>
void with_dtype(c10::ScalarType dtype, F f) {
  if (dtype == c10::ScalarType::Float) f(float{});
  else f(c10::BFloat16{});
}

// Whether the kernels run their AVX-512 build (the CPU has it and set_kernel_isa did not say avx2).
bool avx512_selected();

}  // namespace lft::model::kernels

#define LFT_KERNEL(...)                                                                              \
  (::lft::model::kernels::avx512_selected() ? ::lft::model::kernels::avx512::__VA_ARGS__            \
                                            : ::lft::model::kernels::avx2::__VA_ARGS__)
