// The device a rank computes on: cuda:<local rank / ranks_per_gpu> when this build has CUDA and
// the node has enough GPUs, else the CPU, with the reason.
#pragma once

#include <c10/core/Device.h>

#include <string>

namespace lft {

struct DeviceChoice {
  bool cuda = false;
  int index = -1;          // CUDA device index when cuda
  bool shared = false;     // several ranks compute on this GPU (ranks_per_gpu > 1)
  std::string name;        // "cpu" or "cuda:0 (NVIDIA H200)"
  std::string cpu_reason;  // why not CUDA, when on the CPU

  c10::Device torch_device() const {
    return cuda ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index)) : c10::Device(c10::kCPU);
  }
};

// Picks and (for CUDA) activates the device of a rank with `local_rank` of `local_size`.
DeviceChoice select_device(int local_rank, int local_size, bool use_cpu = false, int ranks_per_gpu = 1);

}  // namespace lft
