#include "lft/runtime/side_stream.h"

#include "lft/build_config.h"
#if LFT_HAS_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <map>
#include <mutex>
#endif

namespace lft {

#if LFT_HAS_CUDA
namespace {

// One side stream per device for the whole run: a stream from the pool on each scope would put
// consecutive copies on different streams, with no order between them.
c10::cuda::CUDAStream side_stream(c10::DeviceIndex index) {
  static std::mutex mutex;
  static std::map<c10::DeviceIndex, c10::cuda::CUDAStream> streams;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = streams.find(index);
  if (it == streams.end()) it = streams.emplace(index, c10::cuda::getStreamFromPool(false, index)).first;
  return it->second;
}

// The side stream starts after everything the compute stream queued before the scope (FSDP2's
// wait_stream): a block the allocator hands out again may still be read by compute kernels.
c10::cuda::CUDAStream after_compute(c10::DeviceIndex index) {
  const c10::cuda::CUDAStream side = side_stream(index);
  at::cuda::CUDAEvent compute_done;
  compute_done.record(c10::cuda::getCurrentCUDAStream(index));
  compute_done.block(side);
  return side;
}

}  // namespace

struct SideStreamScope::Guard {
  explicit Guard(c10::DeviceIndex index) : guard(after_compute(index)) {}
  c10::cuda::CUDAStreamGuard guard;
};
#else
struct SideStreamScope::Guard {};
#endif

SideStreamScope::SideStreamScope(const c10::Device& device) {
#if LFT_HAS_CUDA
  if (device.is_cuda()) guard_ = std::make_unique<Guard>(device.index());
#else
  (void)device;
#endif
}

SideStreamScope::~SideStreamScope() = default;

}  // namespace lft
