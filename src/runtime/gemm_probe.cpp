#include "lft/runtime/gemm_probe.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace lft {
namespace {

// The best of three windows of at least 3 ms each, after two warm-up calls: a process's first
// GEMMs pay for the library's set-up and the thread pool's wake-up (measured: fp32 at 1.4 GFLOP/s
// in the first window of a fresh lftrain, 44 after).
double gflops(at::ScalarType dtype) {
  constexpr std::int64_t n = 256;
  const at::Tensor a = at::randn({n, n}).to(dtype), b = at::randn({n, n}).to(dtype);
  at::Tensor c = at::mm(a, b);
  c = at::mm(a, b);
  using Clock = std::chrono::steady_clock;
  double best = 0;
  for (int window = 0; window < 3; ++window) {
    const auto start = Clock::now();
    int calls = 0;
    double seconds = 0;
    do {
      c = at::mm(a, b);
      ++calls;
      seconds = std::chrono::duration<double>(Clock::now() - start).count();
    } while (seconds < 3e-3);
    best = std::max(best, 2.0 * n * n * n * calls / seconds / 1e9);
  }
  return best;
}

}  // namespace

GemmRates cpu_gemm_rates(at::ScalarType low_precision) {
  // On one thread: a loaded machine (other ranks, other jobs) stalls a thread pool's barriers by
  // far more than it slows one thread, and would make either rate look like the slow path.
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const GemmRates rates{gflops(low_precision), gflops(at::kFloat)};
  at::set_num_threads(threads);
  return rates;
}

std::string slow_low_precision_warning(at::ScalarType dtype, const GemmRates& rates) {
  if (rates.low_precision >= 0.25 * rates.fp32) return "";  // the slow path is 40-140x slower
  const std::string name = dtype == at::kHalf ? "fp16" : "bf16";
  char text[512];
  std::snprintf(text, sizeof text,
                "warning: %s matmuls run at %.1f GFLOP/s on this CPU against %.1f GFLOP/s in fp32 (%.0fx slower: "
                "the CPU has no %s instructions, or oneDNN is held below them by ONEDNN_MAX_CPU_ISA, and LibTorch "
                "takes a slow path); this run's steps would take many times as long as in fp32\n"
                "  hint: train in fp32 (%s = false; for fsdp2 also dist_config.mixed_precision = \"fp32\"), "
                "or use a CPU with AVX512-BF16 or AMX",
                name.c_str(), rates.low_precision, rates.fp32, rates.fp32 / rates.low_precision,
                dtype == at::kHalf ? "fp16 (AVX512-FP16 or AMX-FP16)" : "bf16 (AVX512-BF16 or AMX)",
                name.c_str());
  return text;
}

}  // namespace lft
