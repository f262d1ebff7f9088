#include "lft/runtime/error.h"

#include <mpi.h>

#include <cstdio>
#include <chrono>
#include <cstdlib>
#include <thread>

namespace lft {

int world_rank_or_minus_one() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return -1;
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

void fatal_one(const std::string& message) {
  const int rank = world_rank_or_minus_one();
  std::fprintf(stderr, "[rank %d] lftrain: %s\n", rank, message.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  if (rank >= 0) {
    // MPI_Abort may not return, nor end the job, when a peer is stopped (SIGSTOP, a frozen node):
    // the process then leaves on its own, so that the launcher sees it gone and ends the job.
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::seconds(kAbortGraceSeconds));
      std::_Exit(kAbortExitCode);
    }).detach();
    MPI_Abort(MPI_COMM_WORLD, kAbortExitCode);
  }
  std::_Exit(kAbortExitCode);
}

}  // namespace lft
