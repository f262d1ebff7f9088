// The two kinds of fatal error (docs/errors.md):
//  - UsageError: every rank sees the same problem (bad config, missing file). main() catches it,
//    rank 0 prints one message, every rank exits with status 2.
//  - fatal_one(): one rank sees a problem the others cannot know about (I/O failure, a peer that
//    died). It prints "[rank N] ..." and aborts the whole job.
#pragma once

#include <stdexcept>
#include <string>

namespace lft {

// Exit status of a run rejected before any work started.
constexpr int kUsageExitCode = 2;
// Exit status passed to MPI_Abort when one rank fails.
constexpr int kAbortExitCode = 3;
// Seconds a rank waits for MPI_Abort to end the job before it exits on its own (fatal_one).
constexpr int kAbortGraceSeconds = 10;

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Exit status of a run that started but had to stop, every rank agreeing (a NaN loss).
constexpr int kRunFailedExitCode = 1;

// Every rank sees it (the values it is about are global), so main() handles it like a
// UsageError: one message from rank 0, exit status kRunFailedExitCode.
class RunFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// strerror(err) (err 0: unknown), and when the write failed for want of space (ENOSPC, EDQUOT, EFBIG, or under
// 16 MiB left on the file system of `dir`) a note that says so and what to do.
std::string describe_write_error(int err, const std::string& dir);

// Prints "[rank N] lftrain: <message>" to stderr and aborts every rank of the job. Never returns.
[[noreturn]] void fatal_one(const std::string& message);

// World rank of this process, or -1 before MPI is initialised (used to prefix messages).
int world_rank_or_minus_one();

}  // namespace lft
