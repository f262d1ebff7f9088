// lfmerge: exports an lftrain checkpoint as a Hugging Face model folder (or one HDF5 file, or a
// LoRA checkpoint's adapters for PEFT), or describes it (--inspect). A thin main over
// lft/ckpt/merge.h. One process: MPI is initialised as a singleton (it also runs under
// `mpirun -np 1`), the checkpoint is read with MPI_COMM_SELF.
// Exit status: 0 done, 2 wrong command line or input, 1 writing failed.
#include <mpi.h>
#include <signal.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "lft/ckpt/merge.h"
#include "lft/runtime/error.h"
#include "lft/runtime/runtime.h"

namespace {

int run(const lft::ckpt::MergeCommand& cmd) {
  try {
    if (cmd.action == lft::ckpt::MergeCommand::Action::Inspect) {
      std::fputs(lft::ckpt::inspect_checkpoint(cmd.inspect_path).c_str(), stdout);
    } else {
      std::fputs(lft::ckpt::merge_checkpoint(cmd.options).text.c_str(), stdout);
    }
    return 0;
  } catch (const lft::UsageError& e) {
    std::fprintf(stderr, "lfmerge: %s\n", e.what());
    return lft::kUsageExitCode;
  } catch (const lft::ckpt::MergeIoError& e) {
    std::fprintf(stderr, "lfmerge: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lfmerge: unexpected error: %s\n", e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  lft::ckpt::MergeCommand cmd;
  try {
    cmd = lft::ckpt::parse_merge_command_line(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const lft::UsageError& e) {
    std::fprintf(stderr, "lfmerge: %s\n", e.what());
    return lft::kUsageExitCode;
  }
  if (cmd.action == lft::ckpt::MergeCommand::Action::Help) {
    std::fputs(lft::ckpt::merge_usage().c_str(), stdout);
    return 0;
  }

  // Past a file-size limit, write() then fails with EFBIG (reported, partial files removed)
  // instead of the process being killed.
  ::signal(SIGXFSZ, SIG_IGN);
  int provided = 0, size = 1, rank = 0;
  lft::prefer_isolated_singleton();
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int status = 0;
  if (size != 1) {
    if (rank == 0)
      std::fprintf(stderr,
                   "lfmerge: runs as one process, this job has %d: start it without mpirun, or "
                   "with mpirun -np 1\n",
                   size);
    status = lft::kUsageExitCode;
  } else {
    status = run(cmd);
  }
  std::fflush(stdout);
  MPI_Finalize();
  return status;
}
