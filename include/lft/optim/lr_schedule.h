// Learning-rate schedules with the names and meanings of Hugging Face's get_scheduler
// (transformers 5.23): lr(step) = base_lr * lambda(step), where step counts optimizer steps from 0
// and lambda is HF's lr_lambda for that name, fed num_warmup_steps, num_training_steps and the
// lr_scheduler_kwargs. As in HF, plain "constant" has no warmup, and every other schedule warms up
// linearly from 0 (cosine_warmup_with_min_lr from 1/W or warmup_lr_rate). warmup_stable_decay
// gets LlamaFactory's defaults: a third of the steps after warmup stable, the rest decaying.
// "reduce_lr_on_plateau" and "greedy" follow eval metrics and are not offered.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace lft::optim {

struct LrScheduleSpec {
  std::string name;  // lr_scheduler_type
  double base_lr = 0;
  std::int64_t warmup_steps = 0;
  std::int64_t total_steps = 0;
  std::map<std::string, double> kwargs;  // lr_scheduler_kwargs
};

// The names accepted (for the config schema's allowed values), in HF's order.
const std::vector<std::string>& lr_scheduler_names();
// Every lr_scheduler_kwargs key some schedule takes.
const std::vector<std::string>& lr_scheduler_kwarg_names();

class LrSchedule {
 public:
  // Throws std::invalid_argument for an unknown name, a kwarg the schedule does not take, or
  // values HF refuses (cosine_with_min_lr without exactly one of min_lr and min_lr_rate,
  // polynomial with lr_end >= base_lr).
  explicit LrSchedule(LrScheduleSpec spec);
  // The learning rate of optimizer step `step` (0-based: the first update uses lr(0)).
  double lr(std::int64_t step) const { return spec_.base_lr * lambda_(step); }
  // The warmup the schedule applies (0 for constant, which ignores it).
  std::int64_t warmup_steps() const;

 private:
  LrScheduleSpec spec_;
  std::function<double(std::int64_t)> lambda_;
};

// HF 5's rule: warmup_steps when >= 1, else ceil(total_steps * warmup_ratio) (computed in double,
// so 0.07 of 100 is 8).
std::int64_t resolve_warmup_steps(std::int64_t warmup_steps, double warmup_ratio,
                                  std::int64_t total_steps);

}  // namespace lft::optim
