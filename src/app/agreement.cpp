#include "lft/app/agreement.h"

#include <mpi.h>

#include <climits>
#include <cstdint>
#include <vector>

#include "lft/comm/watchdog.h"
#include "lft/runtime/check.h"

namespace lft::app {

void agree_or_throw(const std::string& error) {
  int rank = 0;
  LFT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  Watchdog::Scope scope("agreeing on the set-up verdict", Watchdog::setup_timeout(),
                        "setup_timeout");
  const int mine = error.empty() ? INT_MAX : rank;
  int first = INT_MAX;
  LFT_MPI_CHECK(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  if (first == INT_MAX) return;
  std::string message = rank == first ? error : std::string();
  std::int64_t length = static_cast<std::int64_t>(message.size());
  LFT_MPI_CHECK(MPI_Bcast(&length, 1, MPI_INT64_T, first, MPI_COMM_WORLD));
  message.resize(static_cast<size_t>(length));
  LFT_MPI_CHECK(MPI_Bcast(message.data(), static_cast<int>(length), MPI_CHAR, first, MPI_COMM_WORLD));
  if (first != 0) message = "[rank " + std::to_string(first) + "] " + message;
  throw UsageError(message);
}

void agree_on_launch(const std::string& command_line) {
  std::uint64_t hash = 1469598103934665603ull;  // FNV-1a
  for (const unsigned char c : command_line) hash = (hash ^ c) * 1099511628211ull;
  int size = 0;
  LFT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  std::vector<std::uint64_t> all(static_cast<std::size_t>(size));
  {
    Watchdog::Scope scope("comparing the ranks' command lines", Watchdog::setup_timeout(), "setup_timeout");
    LFT_MPI_CHECK(MPI_Allgather(&hash, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD));
  }
  std::string differ;
  for (int r = 1; r < size; ++r)
    if (all[static_cast<std::size_t>(r)] != all[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(r);
  if (!differ.empty())
    throw UsageError("the ranks were launched with different settings: rank(s) " + differ +
                     " have another config file, mode or key=value overrides than rank 0\n"
                     "  hint: launch every rank with the same command line (one mpirun/srun program, not MPMD)");
}

}  // namespace lft::app
