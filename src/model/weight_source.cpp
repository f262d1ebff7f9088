#include "lft/model/weight_source.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

namespace lft::model {

void load_weights(torch::nn::Module& model, const WeightSource& source) {
  at::NoGradGuard no_grad;
  for (auto& item : model.named_parameters(/*recurse=*/true)) {
    at::Tensor& p = item.value();
    source.read_rows(item.key(), 0, p.dim() == 0 ? 1 : p.size(0), p);
  }
}

}  // namespace lft::model
