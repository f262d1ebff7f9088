// The device a rank computes on: a CUDA device when this build has CUDA and the rank sees a GPU,
// else the CPU, with the reason. Which GPU: cuda:<local rank / ranks_per_gpu> when the rank sees
// every GPU its node's ranks need; else the launcher bound the rank to fewer (Slurm's
// --gpus-per-task / --gpu-bind, a per-rank CUDA_VISIBLE_DEVICES) and the rank takes one of those
// it sees (gpu_index). Two ranks on one GPU are refused unless ranks_per_gpu shares it
// (shared_gpu_conflict: NCCL cannot put two ranks of one communicator on one device).
#pragma once

#include <c10/core/Device.h>

#include <optional>
#include <string>
#include <vector>

namespace lft {

struct DeviceChoice {
  bool cuda = false;
  int index = -1;          // CUDA device index when cuda
  bool shared = false;     // several ranks compute on this GPU (ranks_per_gpu > 1)
  std::string name;        // "cpu" or "cuda:0 (NVIDIA H200)"
  std::string uuid;        // the GPU's UUID ("GPU-8c6e...") when cuda: the same GPU on every rank
  std::string cpu_reason;  // why not CUDA, when on the CPU

  c10::Device torch_device() const {
    return cuda ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index)) : c10::Device(c10::kCPU);
  }
};

// Picks and (for CUDA) activates the device of a rank with `local_rank` of `local_size`.
DeviceChoice select_device(int local_rank, int local_size, bool use_cpu = false, int ranks_per_gpu = 1);

// The index, among the `visible` GPUs this rank sees, of the GPU it drives: local_rank /
// ranks_per_gpu when the rank sees enough for its node, else that modulo `visible` (the launcher
// bound this rank to its GPUs). None without a visible GPU.
std::optional<int> gpu_index(int local_rank, int local_size, int visible, int ranks_per_gpu);

// The error when ranks would share a GPU that ranks_per_gpu does not share: more than
// ranks_per_gpu ranks on one UUID. `uuids[r]` is rank r's GPU ("" on the CPU). Empty when none.
std::string shared_gpu_conflict(const std::vector<std::string>& uuids, int ranks_per_gpu);

}  // namespace lft
