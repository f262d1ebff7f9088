#include "lft/train/output_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "lft/ckpt/checkpoint_files.h"
#include "lft/runtime/error.h"
#include "lft/runtime/log.h"

namespace lft::train {

OutputLock::OutputLock(const std::string& output_dir) {
  ckpt::make_directories(output_dir);
  const std::string path = output_dir + "/.lftrain.lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw UsageError("cannot create " + path + ": " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    if (error == EWOULDBLOCK) {
      char holder[256] = {0};
      const ssize_t n = ::pread(fd_, holder, sizeof holder - 1, 0);
      std::string who = n > 0 ? std::string(holder, static_cast<std::size_t>(n)) : "another process";
      while (!who.empty() && who.back() == '\n') who.pop_back();
      ::close(fd_);
      fd_ = -1;
      throw UsageError("output_dir " + output_dir + " is in use by another lftrain run (" + who +
                       ")\n  hint: wait for that run to end, or give this one another output_dir");
    }
    log_rank("warning: cannot lock " + path + " (" + std::strerror(error) +
             "; the file system has no locks): nothing stops a second run on this output_dir");
    ::close(fd_);
    fd_ = -1;
    return;
  }
  char host[128] = {0};
  ::gethostname(host, sizeof host - 1);
  const std::string who = std::string("host ") + host + ", pid " + std::to_string(::getpid()) + ", since " +
                          std::to_string(static_cast<long long>(std::time(nullptr))) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, who.data(), who.size(), 0) != static_cast<ssize_t>(who.size()))
    log_rank("warning: cannot write the holder into " + path + ": " + std::strerror(errno));
}

OutputLock::~OutputLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

}  // namespace lft::train
