// Small blocking MPI helpers for set-up work outside the Communicator counters (rank and size of
// a communicator; every rank's variable-length bytes).
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

namespace lft {

int mpi_rank(MPI_Comm comm);
int mpi_size(MPI_Comm comm);

// Every rank's `mine`, in rank order, on every rank (MPI_Allgather of the lengths, then
// MPI_Allgatherv). Throws lft::UsageError when the total exceeds MPI's int count.
std::vector<std::string> all_gather_bytes(MPI_Comm comm, const std::string& mine);

}  // namespace lft
