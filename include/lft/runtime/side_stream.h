// While a SideStreamScope lives, the CUDA work the thread queues goes to the device's one side
// stream, so that it overlaps the compute stream: host-to-device copies of offloaded shards ahead
// of their all-gather. The side stream first waits for what the compute stream queued before the
// scope, so memory the allocator hands out again is not written while compute kernels still
// read it. A no-op for the CPU.
#pragma once

#include <c10/core/Device.h>

#include <memory>

namespace lft {

class SideStreamScope {
 public:
  explicit SideStreamScope(const c10::Device& device);
  ~SideStreamScope();
  SideStreamScope(const SideStreamScope&) = delete;
  SideStreamScope& operator=(const SideStreamScope&) = delete;

 private:
  struct Guard;
  std::unique_ptr<Guard> guard_;
};

}  // namespace lft
