// One run per output_dir: rank 0 holds an exclusive lock (flock) on <output_dir>/.lftrain.lock
// for the life of the run, with the holder's host, pid and start time written in it, so a second
// run on the same folder is refused instead of truncating the first one's log and checkpoints.
#pragma once

#include <string>

namespace lft::train {

class OutputLock {
 public:
  // Creates output_dir if needed and takes the lock. Throws UsageError, naming the holder, when
  // another process holds it; on a file system without locks it logs a warning and holds none.
  explicit OutputLock(const std::string& output_dir);
  ~OutputLock();
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace lft::train
