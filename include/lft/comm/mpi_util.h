// Small blocking MPI helpers for set-up work outside the Communicator counters: rank and size of
// a communicator, every rank's variable-length bytes, one rank's string, agreeing on an error.
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

// Collective. Rank `root`'s string on every rank.
void broadcast_string(MPI_Comm comm, int root, std::string& s);

// Collective. "" if `local_error` is empty on every rank, else the message of the lowest rank that
// has one (the same string on every rank), that rank in `*from_rank` when asked.
std::string agree_on_error(MPI_Comm comm, const std::string& local_error, int* from_rank = nullptr);

}  // namespace lft
