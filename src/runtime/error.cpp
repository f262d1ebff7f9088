#include "lft/runtime/error.h"

#include <mpi.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "lft/runtime/signals.h"

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

std::string describe_write_error(int err, const std::string& dir) {
  std::string text = err != 0 ? std::strerror(err) : "the library gave no system error";
  struct statvfs fs {};
  const bool known = ::statvfs(dir.c_str(), &fs) == 0;
  const auto free_bytes = known ? static_cast<unsigned long long>(fs.f_bavail) * fs.f_frsize : 0ULL;
  if (err == ENOSPC || err == EDQUOT || err == EFBIG || (known && free_bytes < (16ULL << 20)))
    text += " (no space: " + std::to_string(free_bytes) + " bytes free on the file system of " + dir +
            ", or a quota or file-size limit reached; free space, lower save_total_limit, or "
            "choose another output_dir)";
  return text;
}

void fatal_one(const std::string& message) {
  set_graceful_stop(false);  // a SIGTERM from the launcher tearing the job down now just ends this rank
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
