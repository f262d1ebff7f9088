// Measures this machine's matmul rate (the denominator of "model FLOP/s as a fraction of the
// GEMM rate") with the same LibTorch, BLAS and thread count lftrain uses. Prints one JSON object:
//   {"fp32": {"1": GFLOP/s, "2": ...}, "bf16": {...}}
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

namespace {

double gflops(at::ScalarType dtype, int threads, int64_t n) {
  at::set_num_threads(threads);
  // A CPU without native kernels for this dtype (bf16 on AVX2) runs at ~1 GFLOP/s: measure that
  // on a small matrix instead of waiting minutes for a large one.
  if (n > 256 && gflops(dtype, threads, 256) < 10.0) return gflops(dtype, threads, 256);
  const auto a = at::randn({n, n}).to(dtype);
  const auto b = at::randn({n, n}).to(dtype);
  at::Tensor c = at::matmul(a, b);  // warm-up
  double best = 0.0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    c = at::matmul(a, b);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, 2.0 * n * n * n / s / 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::stoll(argv[1]) : 2048;
  const int max_threads = static_cast<int>(std::thread::hardware_concurrency());
  std::printf("{");
  const char* names[] = {"fp32", "bf16"};
  const at::ScalarType types[] = {at::kFloat, at::kBFloat16};
  for (int t = 0; t < 2; ++t) {
    std::printf("%s\"%s\": {", t ? ", " : "", names[t]);
    for (int threads = 1; threads <= max_threads; threads *= 2)
      std::printf("%s\"%d\": %.1f", threads > 1 ? ", " : "", threads, gflops(types[t], threads, n));
    std::printf("}");
  }
  std::printf("}\n");
  return 0;
}
