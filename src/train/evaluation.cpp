// The loss over the held-out sequences (val_size), weighted as in training.
#include <ATen/ATen.h>

#include "lft/comm/device_read.h"
#include "trainer_state.h"

namespace lft::train {

double Trainer::evaluate() {
  State& s = *s_;
  const data::SftDataset& eval = s.data->eval();
  const std::int64_t n = eval.num_sequences(), dp = s.mesh.shape().dp_size(), rank = s.mesh.dp_rank();
  const std::int64_t micro = s.plan.micro_batch;
  // Every rank runs the same number of forwards (sharded engines gather collectively); a rank
  // past the end repeats sequence 0 with weight 0.
  const std::int64_t chunks = (n + dp * micro - 1) / (dp * micro);
  // The losses add up on the device; the host reads them once, after the last batch.
  at::Tensor loss = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(s.mesh.device()));
  double weight = 0.0;
  c10::NoGradGuard no_grad;
  for (std::int64_t c = 0; c < chunks; ++c) {
    std::vector<std::int64_t> indices;
    for (std::int64_t j = 0; j < micro; ++j) {
      const std::int64_t i = (c * dp + rank) * micro + j;
      if (i < n) indices.push_back(i);
    }
    const double keep = indices.empty() ? 0.0 : 1.0;
    if (indices.empty()) indices.push_back(0);
    const data::Batch b = eval.batch(indices, s.data->pad_to_multiple_of());
    engine::MicroBatchOptions options;
    options.compute = s.plan.compute;
    options.backward = false;
    const at::Tensor sums = s.engine->run_micro_batches(*s.model, {s.device_batch(b)}, options).sum();
    if (keep == 0.0) continue;  // a repeated sequence: run for the collectives, not counted
    loss += sums;
    weight += b.weights.to(at::kDouble).sum().item<double>();
  }
  at::Tensor sums = at::tensor({read_on_host(loss, "reading the evaluation loss").item<double>(), weight}, at::kDouble);
  s.mesh.dp().all_reduce(sums);
  return sums[0].item<double>() / sums[1].item<double>();
}

}  // namespace lft::train
