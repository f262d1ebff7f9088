// bf16 / fp16 compute over fp32 master weights: autocast for the forward pass only.
#pragma once

#include <ATen/autocast_mode.h>

namespace lft::model {

class AutocastScope {
 public:
  AutocastScope(at::ScalarType dtype, at::DeviceType device) : on_(dtype != at::kFloat), device_(device) {
    if (!on_) return;
    at::autocast::set_autocast_dtype(device_, dtype);
    at::autocast::set_autocast_enabled(device_, true);
  }
  ~AutocastScope() {
    if (!on_) return;
    at::autocast::set_autocast_enabled(device_, false);
    at::autocast::clear_cache();
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool on_;
  at::DeviceType device_;
};

}  // namespace lft::model
