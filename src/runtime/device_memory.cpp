#include "lft/runtime/device_memory.h"

#include "lft/build_config.h"
#if LFT_HAS_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace lft {

std::int64_t cuda_peak_bytes_in_use(int index) {
#if LFT_HAS_CUDA
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(index));
  return stats.allocated_bytes[static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
#else
  (void)index;
  return 0;
#endif
}

}  // namespace lft
