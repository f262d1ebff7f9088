// The MPI progress thread. Open MPI (as Debian ships it) advances a non-blocking collective only
// inside MPI calls of the rank that posted it: a bucket all-reduce posted from a gradient hook
// sits still until the next hook polls it, and most of it happens in the final wait. While one
// of these objects lives, a thread wakes every `interval` while any MPI operation of this process
// is in flight, and makes one progress call (MPI_Iprobe on a private communicator, which runs
// Open MPI's progress engine: message transfers and the rounds of libnbc's schedules). It never
// touches a request, so waits and tests stay on the thread that posted them. Needs
// MPI_THREAD_MULTIPLE (the runtime asks for it). At most one lives at a time, and it must be
// destroyed before MPI_Finalize.
#pragma once

#include <chrono>
#include <memory>

namespace lft {

class MpiProgressThread {
 public:
  // interval 0: no thread (operations advance only when the rank polls or waits).
  explicit MpiProgressThread(std::chrono::microseconds interval);
  ~MpiProgressThread();
  MpiProgressThread(const MpiProgressThread&) = delete;
  MpiProgressThread& operator=(const MpiProgressThread&) = delete;

  // Called by the MPI backend around each posted operation.
  static void posted();
  static void completed();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace lft
