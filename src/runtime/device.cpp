#include "lft/runtime/device.h"

#include <cstdio>
#include <map>

#include "lft/build_config.h"

#if LFT_HAS_CUDA
#include <cuda_runtime_api.h>

#include "lft/runtime/cuda_check.h"
#endif

namespace lft {

std::optional<int> gpu_index(int local_rank, int local_size, int visible, int ranks_per_gpu) {
  if (visible <= 0) return std::nullopt;
  const int wanted = local_rank / ranks_per_gpu;
  if (static_cast<long>(visible) * ranks_per_gpu >= local_size) return wanted;
  return wanted % visible;  // bound by the launcher: each rank sees its own GPU(s)
}

std::string shared_gpu_conflict(const std::vector<std::string>& uuids, int ranks_per_gpu) {
  std::map<std::string, std::vector<int>> ranks_of;
  for (int r = 0; r < static_cast<int>(uuids.size()); ++r)
    if (!uuids[r].empty()) ranks_of[uuids[r]].push_back(r);
  for (const auto& [uuid, ranks] : ranks_of) {
    if (static_cast<int>(ranks.size()) <= ranks_per_gpu) continue;
    std::string list;
    for (int r : ranks) list += (list.empty() ? "" : ", ") + std::to_string(r);
    return "ranks " + list + " would all compute on GPU " + uuid + " but ranks_per_gpu = " +
           std::to_string(ranks_per_gpu) + " (NCCL cannot put two ranks of one communicator on one GPU)\n"
           "  hint: give each rank its own GPU (srun --gpus-per-task=1, or --gpus-per-node=N with "
           "--gpu-bind=single:1; mpirun with one CUDA_VISIBLE_DEVICES per rank), or set ranks_per_gpu = " +
           std::to_string(ranks.size()) + " to share it through host-staged MPI communicators";
  }
  return "";
}

DeviceChoice select_device(int local_rank, int local_size, bool use_cpu, int ranks_per_gpu) {
  DeviceChoice d;
  d.name = "cpu";
  if (use_cpu) {
    d.cpu_reason = "use_cpu = true";
    return d;
  }
#if LFT_HAS_CUDA
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error: "no GPU" is not a failure here
    d.cpu_reason = std::string("no usable GPU (") + cudaGetErrorString(rc) + ")";
    return d;
  }
  const std::optional<int> index = gpu_index(local_rank, local_size, count, ranks_per_gpu);
  if (!index) {
    d.cpu_reason = "no GPU visible to this rank";
    return d;
  }
  LFT_CUDA_CHECK(cudaSetDevice(*index));
  cudaDeviceProp prop{};
  LFT_CUDA_CHECK(cudaGetDeviceProperties(&prop, *index));
  char uuid[64];
  const auto* b = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
  std::snprintf(uuid, sizeof uuid, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  d.cuda = true;
  d.index = *index;
  d.uuid = uuid;
  d.shared = ranks_per_gpu > 1;
  d.name = "cuda:" + std::to_string(*index) + " (" + prop.name + ", " + d.uuid + ")" +
           (d.shared ? ", shared by " + std::to_string(ranks_per_gpu) + " ranks" : "");
#else
  (void)local_rank;
  (void)local_size;
  (void)ranks_per_gpu;
  d.cpu_reason = "this build has no CUDA (LFT_ENABLE_CUDA)";
#endif
  return d;
}

}  // namespace lft
