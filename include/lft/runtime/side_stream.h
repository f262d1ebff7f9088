// While a SideStreamScope lives, the CUDA work the thread queues goes to a second stream of the
// device (from LibTorch's pool), so that it overlaps the compute stream: host-to-device copies of
// offloaded shards ahead of their all-gather. A no-op for the CPU.
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
