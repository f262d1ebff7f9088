#include "lft/runtime/side_stream.h"

#include "lft/build_config.h"
#if LFT_HAS_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace lft {

#if LFT_HAS_CUDA
struct SideStreamScope::Guard {
  explicit Guard(c10::DeviceIndex index) : guard(c10::cuda::getStreamFromPool(false, index)) {}
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
