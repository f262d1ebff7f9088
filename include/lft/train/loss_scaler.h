// fp16 loss scaling with DeepSpeed's meaning (its fp16 block): the loss is multiplied by the scale
// before backward so small gradients survive fp16. A step whose gradients overflow (inf/NaN) is
// skipped; each overflow spends one unit of `hysteresis`, and once it is spent every overflow
// halves the scale. After `window` good steps in a row the scale doubles and the hysteresis is
// restored. An overflow that would halve a scale already at `min_scale` stops the run.
#pragma once

#include <cstdint>
#include <string>

namespace lft::train {

struct LossScaleOptions {
  double initial_scale = 65536.0;  // 2^initial_scale_power
  double static_scale = 0.0;       // > 0: a fixed scale (DeepSpeed's loss_scale), never changed
  std::int64_t window = 1000;      // loss_scale_window
  int hysteresis = 2;
  double min_scale = 1.0;          // min_loss_scale
};

class LossScaler {
 public:
  explicit LossScaler(LossScaleOptions options);
  double scale() const { return scale_; }
  // After a step's gradients are final: `finite` says whether all of them are. Returns whether
  // the step is applied. Throws lft::RunFailure on an overflow at the minimum scale.
  bool update(bool finite, std::int64_t step);
  // The line the log gets for the last skipped step.
  const std::string& last_event() const { return event_; }
  std::int64_t skipped_steps() const { return skipped_; }
  // Resume: the scale a checkpoint recorded.
  void restore(double scale) { scale_ = scale; }

 private:
  LossScaleOptions options_;
  double scale_;
  int hysteresis_left_;
  std::int64_t good_in_a_row_ = 0;
  std::int64_t skipped_ = 0;
  std::string event_;
};

}  // namespace lft::train
