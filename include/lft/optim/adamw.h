// AdamW with decoupled weight decay over the tensors a rank updates (whole parameters or
// shards). As the Hugging Face Trainer does, 1-d tensors (norm weights, biases) get no decay.
// The update is ATen's fused AdamW kernel, the same arithmetic as torch.optim.AdamW(fused=True).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "lft/optim/optimizer.h"

namespace lft::optim {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decay_all = false;  // decay every parameter (torch's AdamW); false: those with dim() >= 2
};

class AdamW final : public Optimizer {
 public:
  // `params[i]` is updated from `params[i].grad()`; `names[i]` is its name (for state and decay).
  AdamW(std::vector<at::Tensor> params, std::vector<std::string> names, AdamWOptions options);

  void step(double lr) override;
  std::int64_t steps() const override { return steps_; }
  void set_steps(std::int64_t steps) override;
  std::vector<std::string> state_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  const at::Tensor& state(std::size_t param, std::size_t k) const override {
    return k == 0 ? exp_avg_[param] : exp_avg_sq_[param];
  }
  void load_state(std::size_t param, std::size_t k, const at::Tensor& value) override;
  std::vector<std::pair<std::string, double>> hyperparameters() const override;
  std::int64_t state_bytes() const override;
  std::string describe() const override;

  // State per parameter, by index: exp_avg, exp_avg_sq (same shape and dtype as the parameter).
  const at::Tensor& exp_avg(std::size_t i) const { return exp_avg_[i]; }
  const at::Tensor& exp_avg_sq(std::size_t i) const { return exp_avg_sq_[i]; }
  std::size_t size() const { return params_.size(); }
  const AdamWOptions& options() const { return options_; }

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
