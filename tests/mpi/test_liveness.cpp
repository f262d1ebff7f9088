// Liveness probes over UDP, outside MPI: every rank answers; a rank whose responder stops (as a
// frozen or dead process's would) is the one reported, with its host.
#include <gtest/gtest.h>

#include "lft/comm/liveness.h"
#include "mpi_test_util.h"

namespace lft {
namespace {

TEST(Liveness, NamesTheRankThatStopsAnswering) {
  const int rank = test::world().rank(), size = test::world().size();
  if (size < 2) GTEST_SKIP() << "needs 2 ranks";
  std::vector<std::string> hosts(size);
  for (int r = 0; r < size; ++r) hosts[r] = "host" + std::to_string(r / 2);
  Liveness::start(MPI_COMM_WORLD, hosts);
  EXPECT_TRUE(Liveness::unanswered(10).empty()) << "rank " << rank;
  MPI_Barrier(MPI_COMM_WORLD);
  const int silent = size - 1;
  if (rank == silent) Liveness::stop();
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    EXPECT_EQ(Liveness::unanswered(1.5), std::vector<int>{silent});
    const std::string report = Liveness::report(1.5);
    EXPECT_NE(report.find("Lost rank " + std::to_string(silent) + " on " + hosts[silent] +
                          ": no answer to a liveness probe within 1.5 s"),
              std::string::npos)
        << report;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  Liveness::stop();
}

}  // namespace
}  // namespace lft
