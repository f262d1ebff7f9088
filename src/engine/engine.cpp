#include "lft/engine/engine.h"

#include <ATen/ATen.h>

#include "lft/model/autocast.h"
#include "lft/model/causal_lm.h"
#include "lft/model/fused.h"
#include "lft/model/weight_source.h"

namespace lft::engine {

void Engine::prepare_from(model::CausalLM& model, const model::WeightSource& weights) {
  model::load_weights(model, weights);
  prepare(model);
}

at::Tensor Engine::run_micro_batches(model::CausalLM& model, const std::vector<MicroBatch>& batches,
                                     const MicroBatchOptions& o) {
  std::vector<at::Tensor> sums;
  for (std::size_t m = 0; m < batches.size(); ++m) {
    const MicroBatch& b = batches[m];
    begin_micro_batch(o.backward && m + 1 == batches.size());
    at::Tensor losses;
    {
      model::AutocastScope autocast(o.compute, b.input_ids.device().type());
      losses = model.token_losses(b.input_ids, b.segment_ids, b.token_mask) * b.weights;
    }
    sums.push_back(losses.detach().to(at::kDouble).sum(1));
    if (o.backward) (micro_batch_loss(o, losses, b) * o.loss_factor).backward();
  }
  return at::cat(sums);
}

at::Tensor micro_batch_loss(const MicroBatchOptions& o, const at::Tensor& weighted_token_losses, const MicroBatch& batch) {
  return o.objective ? o.objective(weighted_token_losses, batch) : weighted_token_losses.sum();
}

std::vector<TensorBox> whole_boxes(const std::vector<at::Tensor>& tensors, int replicas,
                                   int replica) {
  std::vector<TensorBox> boxes;
  for (const auto& t : tensors)
    boxes.push_back({std::vector<std::int64_t>(t.sizes().begin(), t.sizes().end()),
                     std::vector<std::int64_t>(static_cast<std::size_t>(t.dim()), 0), replicas, replica});
  return boxes;
}

at::Tensor local_grad_norm_squared(const std::vector<at::Tensor>& tensors, const at::Device& device) {
  // Each gradient's squares are summed where it lives (host memory under offload, in double; on
  // the GPU one fused kernel for every norm, accumulated in fp32) and the total is returned on
  // DEVICE, the communicator's that sums it over ranks.
  double host_sum = 0.0;
  std::vector<at::Tensor> on_device;
  for (const auto& t : tensors) {
    const at::Tensor& g = t.grad();
    if (!g.defined()) continue;
    if (g.is_cpu())
      host_sum += model::sum_of_squares(g);
    else
      on_device.push_back(g);
  }
  at::Tensor total = at::full({1}, host_sum, at::TensorOptions().dtype(at::kDouble).device(device));
  if (!on_device.empty())
    total += at::stack(at::_foreach_norm(on_device, 2, at::kFloat)).to(at::kDouble).square().sum().reshape({1})
                 .to(device);
  return total;
}

}  // namespace lft::engine
