#include "lft/runtime/device.h"

#include "lft/build_config.h"

#if LFT_HAS_CUDA
#include <cuda_runtime_api.h>

#include "lft/runtime/cuda_check.h"
#endif

namespace lft {

DeviceChoice select_device(int local_rank, int local_size, bool use_cpu) {
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
  if (count < local_size) {
    d.cpu_reason = std::to_string(local_size) + " ranks on this node but " +
                   std::to_string(count) + " GPU(s): one rank per GPU is required";
    return d;
  }
  LFT_CUDA_CHECK(cudaSetDevice(local_rank));
  cudaDeviceProp prop{};
  LFT_CUDA_CHECK(cudaGetDeviceProperties(&prop, local_rank));
  d.cuda = true;
  d.index = local_rank;
  d.name = "cuda:" + std::to_string(local_rank) + " (" + prop.name + ")";
#else
  (void)local_rank;
  (void)local_size;
  d.cpu_reason = "this build has no CUDA (LFT_ENABLE_CUDA)";
#endif
  return d;
}

}  // namespace lft
