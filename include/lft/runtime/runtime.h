// The process's place in the job: MPI initialisation (MPI_THREAD_MULTIPLE, for the watchdog),
// world rank and size from MPI, local rank and size from the shared-memory split, the launcher,
// the hosts. One Runtime lives for the whole of main(); it finalises MPI when it goes.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

namespace lft {

// Call before MPI_Init. A process started without a launcher (`lftrain run.toml`, `lfmerge ...`)
// is an MPI singleton, and Open MPI 4's singleton forks a daemon at MPI_Init so that
// MPI_Comm_spawn could work later, a call lftrain never makes: 0.1 s a start, ~2.5 s where a munge
// socket with no munged behind it makes the daemon's PMIx retry (measured on a 2-core machine).
// This asks Open MPI for an isolated singleton (no daemon) unless the environment already sets
// it; only the singleton component reads it (processes of mpirun or srun are unaffected), and
// other MPI libraries ignore it.
void prefer_isolated_singleton();

class Runtime {
 public:
  Runtime(int* argc, char*** argv);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  // "mpirun", "srun (PMIx)", "singleton", or "unknown launcher (...)".
  const std::string& launcher() const { return launcher_; }
  const std::string& hostname() const { return hostname_; }
  // Every rank's host, indexed by world rank (gathered at start-up).
  const std::vector<std::string>& hosts() const { return hosts_; }
  int node_count() const { return node_count_; }
  MPI_Comm world() const { return MPI_COMM_WORLD; }

 private:
  int rank_ = 0;
  int world_size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  int node_count_ = 1;
  std::string launcher_;
  std::string hostname_;
  std::vector<std::string> hosts_;
  MPI_Comm node_comm_ = MPI_COMM_NULL;
};

// What launched this process, from the environment the launchers set (never SLURM_PROCID: under
// mpirun inside a Slurm job it is 0 on every rank).
std::string detect_launcher(int world_size);

// Every rank's `mine` (up to 255 bytes each), indexed by rank. Collective over MPI_COMM_WORLD.
std::vector<std::string> all_gather_strings(const std::string& mine);

// Intra-op threads per rank: `requested` when > 0, else cores on the node / ranks on the node
// (at least 1).
int threads_per_rank(int requested, int local_size);

}  // namespace lft
