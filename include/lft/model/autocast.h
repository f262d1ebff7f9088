// bf16 / fp16 compute over fp32 master weights: autocast for the forward pass only.
#pragma once

#include <ATen/autocast_mode.h>

namespace lft::model {

// The dtype a linear on `x` computes in: autocast's on x's device type while it is on (the
// weights and x cast to it), else x's own.
inline at::ScalarType compute_dtype(const at::Tensor& x) {
  const at::DeviceType device = x.device().type();
  return at::autocast::is_autocast_enabled(device) ? at::autocast::get_autocast_dtype(device) : x.scalar_type();
}

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
