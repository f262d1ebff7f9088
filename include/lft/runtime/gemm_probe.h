// How fast this CPU multiplies in a 16-bit dtype against fp32, from one small GEMM each (a few
// milliseconds at start-up). LibTorch's bf16 GEMM runs on oneDNN's bf16 kernels only where the
// CPU has bf16 instructions (AVX512-BF16, AMX); elsewhere (AVX2 only) it takes a path ~100x
// slower than fp32, and a bf16 run there seems to hang at its first step. Measured rather than
// read from the CPU's flags: the rate is what the run will get, whatever the reason.
#pragma once

#include <c10/core/ScalarType.h>

#include <string>

namespace lft {

struct GemmRates {
  double low_precision = 0;  // GFLOP/s of a square GEMM in the 16-bit dtype
  double fp32 = 0;           // the same in fp32
};

// Both rates on one CPU thread (a 256 x 256 x 256 GEMM, the best of three windows of at least 3 ms
// each after two warm-up calls: ~10 ms, ~0.2 s on the slow path).
GemmRates cpu_gemm_rates(at::ScalarType low_precision);

// The start-up warning of a run computing in `dtype` on the CPU when its GEMM is under a quarter
// of fp32's rate there (naming both rates and how to train in fp32), or "" when it is not. The
// slow path is 40-140x slower than fp32 and oneDNN's bf16 kernels 1-3x faster: far from the line.
std::string slow_low_precision_warning(at::ScalarType dtype, const GemmRates& rates);

}  // namespace lft
