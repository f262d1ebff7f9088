// Shared helpers for multi-rank tests.
#pragma once

#include <gtest/gtest.h>

#include "lft/comm/mpi_communicator.h"

namespace lft::test {

// The world as a Communicator (not owned: MPI_COMM_WORLD is never freed).
inline MpiCommunicator& world() {
  static MpiCommunicator comm(MPI_COMM_WORLD, "world", false);
  return comm;
}

}  // namespace lft::test

// Skips (with the reason) a test that needs at least `n` ranks.
#define LFT_REQUIRE_RANKS(n)                                                              \
  do {                                                                                    \
    if (::lft::test::world().size() < (n))                                                \
      GTEST_SKIP() << "needs at least " << (n) << " ranks, this run has "                 \
                   << ::lft::test::world().size();                                        \
  } while (0)
