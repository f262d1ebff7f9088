#include "lft/engine/engine.h"

#include <ATen/ATen.h>

namespace lft::engine {

double local_grad_norm_squared(const std::vector<at::Tensor>& tensors) {
  double sum = 0.0;
  for (const auto& t : tensors) {
    const at::Tensor& g = t.grad();
    if (g.defined()) sum += g.to(at::kDouble).pow(2).sum().item<double>();
  }
  return sum;
}

}  // namespace lft::engine
