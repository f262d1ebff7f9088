// CUDA and NCCL check macros (see check.h). Only for files built when LFT_HAS_CUDA.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

namespace lft::detail {
[[noreturn]] void cuda_call_failed(cudaError_t code, const char* call, const char* file, int line);
[[noreturn]] void nccl_call_failed(ncclResult_t code, const char* call, const char* file, int line);
}  // namespace lft::detail

#define LFT_CUDA_CHECK(call)                                                   \
  do {                                                                         \
    cudaError_t lft_cuda_rc_ = (call);                                         \
    if (lft_cuda_rc_ != cudaSuccess)                                           \
      ::lft::detail::cuda_call_failed(lft_cuda_rc_, #call, __FILE__, __LINE__); \
  } while (0)

#define LFT_NCCL_CHECK(call)                                                   \
  do {                                                                         \
    ncclResult_t lft_nccl_rc_ = (call);                                        \
    if (lft_nccl_rc_ != ncclSuccess)                                           \
      ::lft::detail::nccl_call_failed(lft_nccl_rc_, #call, __FILE__, __LINE__); \
  } while (0)
