#include "lft/comm/device_read.h"

#include <ATen/ATen.h>

#include <chrono>
#include <thread>

#include "lft/build_config.h"
#include "lft/comm/watchdog.h"
#if LFT_HAS_CUDA
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "lft/runtime/cuda_check.h"
#endif
#if LFT_HAS_NCCL
#include "lft/comm/nccl_communicator.h"
#endif

namespace lft {

at::Tensor read_on_host(const at::Tensor& t, const std::string& what) {
  if (t.device().is_cpu()) return t;
#if LFT_HAS_CUDA
  at::Tensor host = at::empty(t.sizes(), t.options().device(at::kCPU).pinned_memory(true));
  host.copy_(t, /*non_blocking=*/true);
  cudaEvent_t copied = nullptr;
  LFT_CUDA_CHECK(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming));
  LFT_CUDA_CHECK(cudaEventRecord(copied, c10::cuda::getCurrentCUDAStream().stream()));
  {
    Watchdog::Scope scope(what, Watchdog::collective_timeout(), "comm_timeout");
    cudaError_t rc = cudaErrorNotReady;
    for (int polls = 0; (rc = cudaEventQuery(copied)) == cudaErrorNotReady; ++polls) {
#if LFT_HAS_NCCL
      if (polls % 64 == 63) nccl_check_async_errors();  // a failed peer ends the job here
#endif
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    cudaEventDestroy(copied);
    LFT_CUDA_CHECK(rc);
  }
  return host;
#else
  (void)what;  // a CPU-only build has no device to wait for
  return t.cpu();
#endif
}

}  // namespace lft
