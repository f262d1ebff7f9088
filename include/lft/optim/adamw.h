// AdamW with decoupled weight decay over the tensors a rank updates (whole parameters or
// shards). As the Hugging Face Trainer does, 1-d tensors (norm weights, biases) get no decay.
// The update is ATen's fused AdamW kernel, the same arithmetic as torch.optim.AdamW(fused=True).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace lft::optim {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

class AdamW {
 public:
  // `params[i]` is updated from `params[i].grad()`; `names[i]` is its name (for state and decay).
  AdamW(std::vector<at::Tensor> params, std::vector<std::string> names, AdamWOptions options);

  // One update with learning rate `lr`. Parameters without a gradient are skipped.
  void step(double lr);
  std::int64_t steps() const { return steps_; }

  // State per parameter, by index: exp_avg, exp_avg_sq (same shape and dtype as the parameter).
  const at::Tensor& exp_avg(std::size_t i) const { return exp_avg_[i]; }
  const at::Tensor& exp_avg_sq(std::size_t i) const { return exp_avg_sq_[i]; }
  std::size_t size() const { return params_.size(); }
  // Restores parameter i's moments (copied in) and the step count of every parameter (resume).
  void load_state(std::size_t i, const at::Tensor& exp_avg, const at::Tensor& exp_avg_sq);
  void set_steps(std::int64_t steps);
  const AdamWOptions& options() const { return options_; }
  // Bytes of optimizer state held by this rank.
  std::int64_t state_bytes() const;

 private:
  void step_group(const std::vector<std::size_t>& group, double lr, double weight_decay);

  std::vector<at::Tensor> params_;
  std::vector<std::string> names_;
  AdamWOptions options_;
  std::vector<at::Tensor> exp_avg_;
  std::vector<at::Tensor> exp_avg_sq_;
  std::vector<at::Tensor> step_count_;  // float scalar per parameter, as the fused kernel wants
  std::vector<std::size_t> decay_;
  std::vector<std::size_t> no_decay_;
  std::int64_t steps_ = 0;
};

}  // namespace lft::optim
