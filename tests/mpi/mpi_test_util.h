// Shared helpers for multi-rank tests.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <string>

#include "lft/comm/mpi_communicator.h"
#include "lft/runtime/device.h"
#include "lft/runtime/runtime.h"

namespace lft::test {

// The world as a Communicator (not owned: MPI_COMM_WORLD is never freed).
inline MpiCommunicator& world() {
  static MpiCommunicator comm(MPI_COMM_WORLD, "world", false);
  return comm;
}

// This rank's device, as lftrain picks it from the rank's place on its node: one GPU per rank,
// or with `share_one_gpu` every rank of the node on GPU 0 (ranks_per_gpu = the node's ranks).
// Where two ranks would share a GPU that is not shared (more ranks than GPUs), every rank gets
// the CPU with lftrain's refusal as the reason, so GPU tests skip saying why. Collective.
inline DeviceChoice this_ranks_device(bool share_one_gpu = false) {
  int local_rank = 0, local_size = 1;
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_size(node, &local_size);
  MPI_Comm_free(&node);
  const int ranks_per_gpu = share_one_gpu ? local_size : 1;
  DeviceChoice device = select_device(local_rank, local_size, false, ranks_per_gpu);
  const std::string conflict = shared_gpu_conflict(all_gather_strings(device.uuid), ranks_per_gpu);
  if (!conflict.empty()) device = DeviceChoice{false, -1, false, "cpu", "", conflict};
  return device;
}

// A fresh folder /tmp/<prefix>-XXXXXX, made by rank 0 and known to every rank (left in place).
inline std::string shared_temp_dir(const std::string& prefix) {
  char path[64];
  std::snprintf(path, sizeof(path), "/tmp/%.40s-XXXXXX", prefix.c_str());
  if (world().rank() == 0 && mkdtemp(path) == nullptr) ADD_FAILURE() << "mkdtemp failed";
  MPI_Bcast(path, sizeof(path), MPI_CHAR, 0, MPI_COMM_WORLD);
  return path;
}

}  // namespace lft::test

// Skips unless this rank got a GPU (a DeviceChoice); the reason names what is missing.
#define LFT_REQUIRE_GPU(device)                                                           \
  do {                                                                                    \
    if (!(device).cuda) GTEST_SKIP() << "no GPU for this rank: " << (device).cpu_reason;  \
  } while (0)

// Skips (with the reason) a test that needs at least `n` ranks.
#define LFT_REQUIRE_RANKS(n)                                                              \
  do {                                                                                    \
    if (::lft::test::world().size() < (n))                                                \
      GTEST_SKIP() << "needs at least " << (n) << " ranks, this run has "                 \
                   << ::lft::test::world().size();                                        \
  } while (0)
