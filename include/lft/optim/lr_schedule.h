// Learning-rate schedules with the shapes of Hugging Face's get_scheduler: linear warmup from 0
// over `warmup_steps`, then constant, linear decay to 0, or cosine decay to 0 at `total_steps`.
// (HF's plain "constant" has no warmup; lftrain applies warmup_steps to every shape.)
#pragma once

#include <cstdint>
#include <string>

namespace lft::optim {

enum class LrShape { Constant, Linear, Cosine };
LrShape lr_shape_from_name(const std::string& name);  // "constant" | "linear" | "cosine"

class LrSchedule {
 public:
  LrSchedule(double base_lr, LrShape shape, std::int64_t warmup_steps, std::int64_t total_steps);
  // The learning rate of optimizer step `step` (0-based: the first update uses lr(0)).
  double lr(std::int64_t step) const;
  std::int64_t warmup_steps() const { return warmup_; }

 private:
  double base_;
  LrShape shape_;
  std::int64_t warmup_;
  std::int64_t total_;
};

// HF's rule: warmup_steps if given (> 0), else ceil(warmup_ratio * total_steps).
std::int64_t resolve_warmup_steps(std::int64_t warmup_steps, double warmup_ratio,
                                  std::int64_t total_steps);

}  // namespace lft::optim
