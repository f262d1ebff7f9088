// The alpha and beta of this machine's links for `lftrain --plan` (tools/bench/plan_check.py):
// MPI_Allreduce of fp32 buffers over MPI_COMM_WORLD, 8 B and 4 MiB, best of several repetitions.
// Prints one JSON object: {"ranks": n, "latency_us": alpha, "busbw_gbps": beta} where alpha is the
// 8-byte time over 2(n-1) ring steps and beta the 4 MiB bus bandwidth (2(n-1)/n x bytes / time).
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <vector>

namespace {

double best_seconds(std::size_t floats, int reps) {
  std::vector<float> buffer(floats, 1.0f);
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    MPI_Allreduce(MPI_IN_PLACE, buffer.data(), static_cast<int>(floats), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double took = MPI_Wtime() - start;
    MPI_Allreduce(MPI_IN_PLACE, &took, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    best = std::min(best, took);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const double steps = std::max(1, 2 * (n - 1));
  const double small = best_seconds(2, 200);
  const std::size_t big_floats = std::size_t{1} << 20;  // 4 MiB
  const double big = best_seconds(big_floats, 10);
  const double bus = (n > 1 ? 2.0 * (n - 1) / n : 1.0) * 4.0 * static_cast<double>(big_floats);
  if (rank == 0)
    std::printf("{\"ranks\": %d, \"latency_us\": %.3f, \"busbw_gbps\": %.4f}\n", n, 1e6 * small / steps, bus / big / 1e9);
  MPI_Finalize();
  return 0;
}
