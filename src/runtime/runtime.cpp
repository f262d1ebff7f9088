#include "lft/runtime/runtime.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <set>

#include "lft/runtime/check.h"
#include "lft/runtime/error.h"
#include "lft/runtime/memory.h"

namespace lft {
namespace {

bool has_env(const char* name) { return std::getenv(name) != nullptr; }

}  // namespace

std::vector<std::string> all_gather_strings(const std::string& mine) {
  constexpr int kLen = 256;
  int world_size = 0;
  LFT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size));
  std::vector<char> all(static_cast<size_t>(kLen) * world_size, '\0');
  char own[kLen] = {0};
  mine.copy(own, kLen - 1);
  LFT_MPI_CHECK(MPI_Allgather(own, kLen, MPI_CHAR, all.data(), kLen, MPI_CHAR, MPI_COMM_WORLD));
  std::vector<std::string> strings;
  for (int r = 0; r < world_size; ++r) strings.emplace_back(&all[static_cast<size_t>(r) * kLen]);
  return strings;
}

std::string detect_launcher(int world_size) {
  if (has_env("OMPI_MCA_orte_hnp_uri") || has_env("PRTE_LAUNCHED")) return "mpirun";
  if (has_env("SLURM_STEP_ID") && has_env("PMIX_RANK")) return "srun (PMIx)";
  if (world_size == 1 && !has_env("OMPI_COMM_WORLD_SIZE") && !has_env("SLURM_STEP_ID"))
    return "singleton";
  return has_env("PMIX_RANK") ? "unknown PMIx launcher" : "unknown launcher";
}

int threads_per_rank(int requested, int local_size) {
  if (requested > 0) return requested;
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return std::max(1, static_cast<int>(cores) / std::max(1, local_size));
}

void prefer_isolated_singleton() { setenv("OMPI_MCA_ess_singleton_isolated", "1", /*overwrite=*/0); }

Runtime::Runtime(int* argc, char*** argv) {
  install_cpu_memory_counter();  // before any tensor the run allocates
  prefer_isolated_singleton();
  int provided = 0;
  LFT_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
  LFT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  LFT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size_));
  if (provided < MPI_THREAD_MULTIPLE)
    fatal_one("the MPI library does not provide MPI_THREAD_MULTIPLE, which the collective "
              "watchdog needs; use an MPI built with thread support (Open MPI >= 4 has it)");
  LFT_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL,
                                    &node_comm_));
  LFT_MPI_CHECK(MPI_Comm_rank(node_comm_, &local_rank_));
  LFT_MPI_CHECK(MPI_Comm_size(node_comm_, &local_size_));
  char name[256] = {0};
  gethostname(name, sizeof(name) - 1);
  hostname_ = name;
  hosts_ = all_gather_strings(hostname_);
  node_count_ = static_cast<int>(std::set<std::string>(hosts_.begin(), hosts_.end()).size());
  launcher_ = detect_launcher(world_size_);
}

Runtime::~Runtime() {
  if (node_comm_ != MPI_COMM_NULL) MPI_Comm_free(&node_comm_);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace lft
