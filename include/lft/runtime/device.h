// The device a rank computes on: cuda:<local rank> when this build has CUDA and the node has
// enough GPUs, else the CPU, with the reason.
#pragma once

#include <string>

namespace lft {

struct DeviceChoice {
  bool cuda = false;
  int index = -1;          // CUDA device index when cuda
  std::string name;        // "cpu" or "cuda:0 (NVIDIA H200)"
  std::string cpu_reason;  // why not CUDA, when on the CPU
};

// Picks and (for CUDA) activates the device of a rank with `local_rank` of `local_size`.
DeviceChoice select_device(int local_rank, int local_size, bool use_cpu = false);

}  // namespace lft
