#include "lft/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace lft::optim {

LrShape lr_shape_from_name(const std::string& name) {
  if (name == "constant") return LrShape::Constant;
  if (name == "linear") return LrShape::Linear;
  if (name == "cosine") return LrShape::Cosine;
  throw std::invalid_argument("unknown lr_scheduler_type '" + name + "'");
}

LrSchedule::LrSchedule(double base_lr, LrShape shape, std::int64_t warmup_steps,
                       std::int64_t total_steps)
    : base_(base_lr), shape_(shape), warmup_(warmup_steps), total_(total_steps) {}

double LrSchedule::lr(std::int64_t step) const {
  if (step < warmup_) return base_ * static_cast<double>(step) / static_cast<double>(std::max<std::int64_t>(1, warmup_));
  const double span = static_cast<double>(std::max<std::int64_t>(1, total_ - warmup_));
  const double progress = static_cast<double>(step - warmup_) / span;
  switch (shape_) {
    case LrShape::Constant: return base_;
    case LrShape::Linear: return base_ * std::max(0.0, 1.0 - progress);
    case LrShape::Cosine: return base_ * std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * progress)));
  }
  return base_;
}

std::int64_t resolve_warmup_steps(std::int64_t warmup_steps, double warmup_ratio,
                                  std::int64_t total_steps) {
  if (warmup_steps > 0) return warmup_steps;
  return static_cast<std::int64_t>(std::ceil(warmup_ratio * static_cast<double>(total_steps)));
}

}  // namespace lft::optim
