#include "lft/train/loss_scaler.h"

#include <algorithm>
#include <cstdio>

#include "lft/runtime/error.h"

namespace lft::train {
namespace {

std::string number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

}  // namespace

LossScaler::LossScaler(LossScaleOptions options)
    : options_(options),
      scale_(options.static_scale > 0 ? options.static_scale : options.initial_scale),
      hysteresis_left_(options.hysteresis) {}

bool LossScaler::update(bool finite, std::int64_t step) {
  if (finite) {
    if (options_.static_scale <= 0 && ++good_in_a_row_ % options_.window == 0) {
      scale_ *= 2.0;
      hysteresis_left_ = options_.hysteresis;
    }
    return true;
  }
  good_in_a_row_ = 0;
  ++skipped_;
  const std::string where = "step " + std::to_string(step) + ": fp16 gradients overflowed at loss scale " + number(scale_);
  if (options_.static_scale > 0)
    throw RunFailure(where + " (a static loss_scale); stopping before the update (nothing was "
                     "written). Set fp16.loss_scale = 0 for dynamic scaling, or lower it.");
  if (--hysteresis_left_ <= 0) {
    if (scale_ <= options_.min_scale)
      throw RunFailure(where + ", the minimum (min_loss_scale); stopping before the update "
                       "(nothing was written). The gradients are not finite at any scale: lower "
                       "learning_rate, set max_grad_norm, or train in bf16.");
    scale_ = std::max(options_.min_scale, scale_ / 2.0);
    hysteresis_left_ = 1;  // DeepSpeed: once spent, every further overflow halves
  }
  event_ = where + "; step skipped, loss scale now " + number(scale_);
  return false;
}

}  // namespace lft::train
