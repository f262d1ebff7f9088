#include "lft/runtime/log.h"

#include <cstdio>

#include "lft/runtime/error.h"

namespace lft {

void log0(const std::string& line) {
  if (world_rank_or_minus_one() > 0) return;
  std::fprintf(stdout, "%s\n", line.c_str());
  std::fflush(stdout);
}

void log_rank(const std::string& line) {
  std::fprintf(stderr, "[rank %d] %s\n", world_rank_or_minus_one(), line.c_str());
  std::fflush(stderr);
}

}  // namespace lft
