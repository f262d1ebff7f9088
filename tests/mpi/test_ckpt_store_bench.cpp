// Throughput of the tensor store (not run by default):
//   mpirun -np 2 lft_mpi_tests --gtest_also_run_disabled_tests --gtest_filter='CkptStoreBench.*'
// LFT_CKPT_BENCH_MIB sets the store size (default 256), TMPDIR where it is written. Writes are
// timed from the StoreWriter constructor through close() (which fsyncs); reads with a warm page
// cache unless the caller drops it between the phases.
#include <ATen/ATen.h>
#include <ftw.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "lft/ckpt/tensor_store.h"
#include "mpi_test_util.h"

namespace lft::ckpt {
namespace {

using test::world;

int remove_bench_entry(const char* path, const struct stat*, int, struct FTW*) {
  return ::remove(path);
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

TEST(CkptStoreBench, DISABLED_Throughput) {
  const int rank = world().rank(), size = world().size();
  const char* env = std::getenv("LFT_CKPT_BENCH_MIB");
  const int64_t mib = env ? std::atoll(env) : 256;
  constexpr int64_t kTensors = 8;
  constexpr int64_t kCols = 4096;
  const int64_t rows = std::max<int64_t>(1, mib * (1 << 20) / 4 / kTensors / kCols);
  const double gib = static_cast<double>(kTensors * rows * kCols * 4) / (1 << 30);

  std::string dir;
  if (rank == 0) {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/lft-ckpt-bench-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir = tmpl;
  }
  int64_t n = static_cast<int64_t>(dir.size());
  MPI_Bcast(&n, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  dir.resize(static_cast<size_t>(n));
  MPI_Bcast(dir.data(), static_cast<int>(n), MPI_CHAR, 0, MPI_COMM_WORLD);

  // Random data: the virtual disk writes zeros far faster than real data.
  const int64_t lo = rows * rank / size, hi = rows * (rank + 1) / size;
  std::vector<Slice> slices;
  for (int64_t t = 0; t < kTensors; ++t)
    slices.push_back(Slice{"model/t" + std::to_string(t), {rows, kCols}, {lo, 0},
                           at::rand({hi - lo, kCols}, at::kFloat)});

  for (StoreMode mode : {StoreMode::SharedFile, StoreMode::PerRank}) {
    const std::string path = dir + (mode == StoreMode::SharedFile ? "/bench.h5" : "/bench");
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = now();
    {
      StoreWriter w(MPI_COMM_WORLD, path, mode);
      w.write(slices);
      w.close();
    }
    const double t1 = now();
    double sum = 0;
    {
      StoreReader r(MPI_COMM_WORLD, path);
      for (int64_t t = 0; t < kTensors; ++t)
        sum += r.read("model/t" + std::to_string(t), {lo, 0}, {hi - lo, kCols}).sum().item<double>();
    }
    MPI_Barrier(MPI_COMM_WORLD);
    const double t2 = now();
    if (rank == 0)
      std::printf("[bench] %s, %d ranks, %.3f GiB: write+fsync %.3f s = %.2f GiB/s, "
                  "read (own rows, warm cache) %.3f s = %.2f GiB/s (checksum %.3g)\n",
                  mode == StoreMode::SharedFile ? "SharedFile" : "PerRank", size, gib, t1 - t0,
                  gib / (t1 - t0), t2 - t1, gib / (t2 - t1), sum);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) ::nftw(dir.c_str(), remove_bench_entry, 16, FTW_DEPTH | FTW_PHYS);
}

// A tensor of LFT_CKPT_LARGE_GIB GiB (default 3) split by rows: more than 1 GiB per rank at 2
// ranks (several collective pieces), a dataset over 2 GiB, and one read of all of it on rank 0.
TEST(CkptStoreBench, DISABLED_LargeTensor) {
  const int rank = world().rank(), size = world().size();
  const char* env = std::getenv("LFT_CKPT_LARGE_GIB");
  const double gib = env ? std::atof(env) : 3.0;
  constexpr int64_t kCols = 1024;
  const int64_t rows = static_cast<int64_t>(gib * (1 << 30) / 4 / kCols);
  // Element (i, j) holds (i * kCols + j) % 16777213: exact in float32.
  auto expected = [](int64_t row0, int64_t nrows) {
    return (at::arange(row0 * kCols, (row0 + nrows) * kCols, at::kLong).remainder(16777213))
        .to(at::kFloat)
        .reshape({nrows, kCols});
  };
  std::string dir;
  if (rank == 0) {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/lft-ckpt-large-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir = tmpl;
  }
  int64_t n = static_cast<int64_t>(dir.size());
  MPI_Bcast(&n, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  dir.resize(static_cast<size_t>(n));
  MPI_Bcast(dir.data(), static_cast<int>(n), MPI_CHAR, 0, MPI_COMM_WORLD);
  const int64_t lo = rows * rank / size, hi = rows * (rank + 1) / size;
  for (StoreMode mode : {StoreMode::SharedFile, StoreMode::PerRank}) {
    const std::string path = dir + (mode == StoreMode::SharedFile ? "/large.h5" : "/large");
    const double t0 = now();
    {
      StoreWriter w(MPI_COMM_WORLD, path, mode);
      w.write({Slice{"big", {rows, kCols}, {lo, 0}, expected(lo, hi - lo)}});
      if (mode == StoreMode::SharedFile) {
        EXPECT_EQ(w.last_io_mode(), 4);
        EXPECT_EQ(w.last_no_collective_cause(), 0u);
      }
      w.close();
    }
    const double t1 = now();
    if (rank == 0) {
      StoreReader r(MPI_COMM_SELF, path);
      at::Tensor all = r.read_full("big");
      const double t2 = now();
      int64_t bad = 0;
      for (int64_t r0 = 0; r0 < rows; r0 += 65536) {
        const int64_t nr = std::min<int64_t>(65536, rows - r0);
        bad += all.narrow(0, r0, nr).ne(expected(r0, nr)).sum().item<int64_t>();
      }
      EXPECT_EQ(bad, 0);
      std::printf("[large] %s: %.2f GiB written by %d ranks in %.2f s; read whole on one rank in "
                  "%.2f s; %lld mismatches\n",
                  mode == StoreMode::SharedFile ? "SharedFile" : "PerRank",
                  static_cast<double>(rows * kCols * 4) / (1 << 30), size, t1 - t0, t2 - t1,
                  static_cast<long long>(bad));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) ::nftw(path.c_str(), remove_bench_entry, 16, FTW_DEPTH | FTW_PHYS);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  if (rank == 0) ::rmdir(dir.c_str());
}

}  // namespace
}  // namespace lft::ckpt
