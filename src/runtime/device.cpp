#include "lft/runtime/device.h"

#include <H5public.h>
#include <mpi.h>
#include <torch/version.h>

#include "lft/build_config.h"

#if LFT_HAS_CUDA
#include <cuda_runtime_api.h>

#include "lft/comm/nccl_communicator.h"
#include "lft/runtime/cuda_check.h"
#endif

namespace lft {

DeviceChoice select_device(int local_rank, int local_size) {
  DeviceChoice d;
  d.name = "cpu";
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

std::string library_versions() {
  char mpi[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  MPI_Get_library_version(mpi, &len);
  std::string mpi_line(mpi);
  mpi_line = mpi_line.substr(0, mpi_line.find_first_of(",\n"));
  unsigned major = 0, minor = 0, release = 0;
  H5get_libversion(&major, &minor, &release);
  std::string out = std::string("LibTorch ") + TORCH_VERSION + ", " + mpi_line + ", HDF5 " +
                    std::to_string(major) + "." + std::to_string(minor) + "." +
                    std::to_string(release);
#if LFT_HAS_NCCL
  out += ", NCCL " + nccl_version();
#else
  out += ", NCCL not built";
#endif
  return out;
}

}  // namespace lft
