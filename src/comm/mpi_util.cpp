#include "lft/comm/mpi_util.h"

#include <climits>
#include <cstdint>

#include "lft/runtime/check.h"
#include "lft/runtime/error.h"

namespace lft {

int mpi_rank(MPI_Comm comm) {
  int r = 0;
  LFT_MPI_CHECK(MPI_Comm_rank(comm, &r));
  return r;
}

int mpi_size(MPI_Comm comm) {
  int n = 0;
  LFT_MPI_CHECK(MPI_Comm_size(comm, &n));
  return n;
}

std::vector<std::string> all_gather_bytes(MPI_Comm comm, const std::string& mine) {
  const int n = mpi_size(comm);
  if (mine.size() > static_cast<std::size_t>(INT_MAX))
    throw UsageError("all_gather_bytes: " + std::to_string(mine.size()) + " bytes on one rank exceed MPI's int count");
  int length = static_cast<int>(mine.size());
  std::vector<int> lengths(static_cast<std::size_t>(n)), displs(static_cast<std::size_t>(n), 0);
  LFT_MPI_CHECK(MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm));
  long long total = 0;
  for (int r = 0; r < n; ++r) {
    if (total > INT_MAX)
      throw UsageError("all_gather_bytes: " + std::to_string(total) + "+ bytes in all exceed MPI's int count");
    displs[static_cast<std::size_t>(r)] = static_cast<int>(total);
    total += lengths[static_cast<std::size_t>(r)];
  }
  std::string all(static_cast<std::size_t>(total), '\0');
  LFT_MPI_CHECK(MPI_Allgatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), displs.data(),
                               MPI_CHAR, comm));
  std::vector<std::string> out;
  for (int r = 0; r < n; ++r)
    out.push_back(all.substr(static_cast<std::size_t>(displs[static_cast<std::size_t>(r)]),
                             static_cast<std::size_t>(lengths[static_cast<std::size_t>(r)])));
  return out;
}

void broadcast_string(MPI_Comm comm, int root, std::string& s) {
  std::int64_t n = static_cast<std::int64_t>(s.size());
  LFT_MPI_CHECK(MPI_Bcast(&n, 1, MPI_INT64_T, root, comm));
  if (n > INT_MAX) fatal_one("a broadcast message exceeds 2 GiB");
  s.resize(static_cast<std::size_t>(n));
  if (n > 0) LFT_MPI_CHECK(MPI_Bcast(s.data(), static_cast<int>(n), MPI_CHAR, root, comm));
}

std::string agree_on_error(MPI_Comm comm, const std::string& local_error, int* from_rank) {
  const int rank = mpi_rank(comm), size = mpi_size(comm);
  const int mine = local_error.empty() ? size : rank;
  int first = size;
  LFT_MPI_CHECK(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm));
  if (from_rank) *from_rank = first;
  if (first == size) return "";
  std::string message = rank == first ? local_error : std::string();
  broadcast_string(comm, first, message);
  return message;
}

}  // namespace lft
