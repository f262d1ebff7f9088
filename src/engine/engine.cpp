#include "lft/engine/engine.h"

#include <ATen/ATen.h>

#include "lft/model/weight_source.h"

namespace lft::engine {

void Engine::prepare_from(torch::nn::Module& model, const model::WeightSource& weights) {
  model::load_weights(model, weights);
  prepare(model);
}

std::vector<TensorBox> whole_boxes(const std::vector<at::Tensor>& tensors, int replicas,
                                   int replica) {
  std::vector<TensorBox> boxes;
  for (const auto& t : tensors)
    boxes.push_back({std::vector<std::int64_t>(t.sizes().begin(), t.sizes().end()),
                     std::vector<std::int64_t>(static_cast<std::size_t>(t.dim()), 0), replicas, replica});
  return boxes;
}

double local_grad_norm_squared(const std::vector<at::Tensor>& tensors) {
  double sum = 0.0;
  for (const auto& t : tensors) {
    const at::Tensor& g = t.grad();
    if (g.defined()) sum += g.to(at::kDouble).pow(2).sum().item<double>();
  }
  return sum;
}

}  // namespace lft::engine
