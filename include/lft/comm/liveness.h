// Peer liveness, outside MPI: every rank answers UDP probes from a thread of its own, so when a
// collective hangs the watchdog can tell which ranks are gone (dead, frozen, or on a host that is
// cut off) and name their hosts, where MPI itself can only wait.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

namespace lft {

class Liveness {
 public:
  // Collective over `world`: opens this rank's UDP socket on every interface, exchanges the
  // addresses and a job token, and starts the responder thread. `hosts` is every rank's host,
  // indexed by rank. Idempotent.
  static void start(MPI_Comm world, const std::vector<std::string>& hosts);
  // Stops the responder (before MPI_Finalize).
  static void stop();
  static bool started();

  // Probes every other rank for up to `seconds`; the ranks that did not answer, ascending.
  static std::vector<int> unanswered(double seconds);
  // One sentence for a report: "ranks 2, 3 on lfthost2 did not answer ..." or that all answer.
  static std::string report(double seconds);
};

// "ranks 2, 3 on lfthost2; rank 5 on node7" (ranks grouped by host, hosts in rank order).
std::string ranks_by_host(const std::vector<int>& ranks, const std::vector<std::string>& hosts);

}  // namespace lft
