#include "lft/app/agreement.h"

#include <mpi.h>

#include <climits>
#include <cstdint>

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

}  // namespace lft::app
