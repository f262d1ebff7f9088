// What the trainer and checkpoints need of an optimizer: an update, a step count, and its state
// as named tensors per parameter (AdamW: exp_avg, exp_avg_sq) plus named hyperparameters, so a
// checkpoint saves and restores any optimizer's state without knowing which one it is.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lft::optim {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update with learning rate `lr`. Parameters without a gradient are skipped.
  virtual void step(double lr) = 0;
  virtual std::int64_t steps() const = 0;
  virtual void set_steps(std::int64_t steps) = 0;
  // The names of the per-parameter state tensors, each the shape of its parameter.
  virtual std::vector<std::string> state_names() const = 0;
  virtual const at::Tensor& state(std::size_t param, std::size_t k) const = 0;
  // Copies `value` into parameter `param`'s state tensor `k` (resume).
  virtual void load_state(std::size_t param, std::size_t k, const at::Tensor& value) = 0;
  // Hyperparameters a checkpoint records beside the state (name, value).
  virtual std::vector<std::pair<std::string, double>> hyperparameters() const = 0;
  // Bytes of optimizer state held by this rank.
  virtual std::int64_t state_bytes() const = 0;
  // One line for the start-up log: which update, with which settings, on which tensors.
  virtual std::string describe() const { return ""; }
};

}  // namespace lft::optim
