#include "lft/app/agreement.h"

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "lft/comm/mpi_util.h"
#include "lft/comm/watchdog.h"
#include "lft/runtime/check.h"

namespace lft::app {

void agree_or_throw(const std::string& error) {
  Watchdog::Scope scope("agreeing on the set-up verdict", Watchdog::setup_timeout(),
                        "setup_timeout");
  int first = 0;
  std::string message = agree_on_error(MPI_COMM_WORLD, error, &first);
  if (message.empty()) return;
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
