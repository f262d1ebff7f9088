#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>

#include "lft/app/session.h"
#include "lft/comm/mpi_util.h"
#include "lft/comm/watchdog.h"
#include "lft/runtime/check.h"
#include "lft/runtime/error.h"

namespace lft::app {

std::string read_config_text(const std::string& path) {
  int rank = 0;
  LFT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  std::string text;
  std::int64_t length = -1;  // -1: rank 0 could not read it; the message travels instead
  if (rank == 0) {
    struct stat st {};
    std::ifstream in(path, std::ios::binary);
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      text = "config error: config file '" + path + "' is a folder, not a file\n  give the path of a TOML "
             "file, e.g. `lftrain inputs/run.toml`";
    } else if (in) {
      std::ostringstream ss;
      ss << in.rdbuf();
      text = ss.str();
      length = static_cast<std::int64_t>(text.size());
    } else {
      text = "config error: cannot read config file '" + path + "': " + std::strerror(errno) +
             "\n  give the path of a TOML file, e.g. `lftrain inputs/run.toml`";
    }
  }
  Watchdog::Scope scope("broadcasting the config file from rank 0", Watchdog::setup_timeout(),
                        "setup_timeout");
  LFT_MPI_CHECK(MPI_Bcast(&length, 1, MPI_INT64_T, 0, MPI_COMM_WORLD));
  broadcast_string(MPI_COMM_WORLD, 0, text);
  if (length < 0) throw UsageError(text);
  return text;
}

}  // namespace lft::app
