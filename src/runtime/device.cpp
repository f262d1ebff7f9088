#include "lft/runtime/device.h"

#include "lft/build_config.h"

#if LFT_HAS_CUDA
#include <cuda_runtime_api.h>

#include "lft/runtime/cuda_check.h"
#endif

namespace lft {

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
  if (static_cast<long>(count) * ranks_per_gpu < local_size) {
    d.cpu_reason = std::to_string(local_size) + " ranks on this node but " + std::to_string(count) +
                   " GPU(s) x ranks_per_gpu = " + std::to_string(ranks_per_gpu) +
                   ": set ranks_per_gpu to share a GPU between ranks";
    return d;
  }
  const int index = local_rank / ranks_per_gpu;
  LFT_CUDA_CHECK(cudaSetDevice(index));
  cudaDeviceProp prop{};
  LFT_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  d.cuda = true;
  d.index = index;
  d.shared = ranks_per_gpu > 1;
  d.name = "cuda:" + std::to_string(index) + " (" + prop.name + ")" +
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
