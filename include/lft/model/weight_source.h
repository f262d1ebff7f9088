// Where a model's starting weights come from, read a box of rows at a time: a rank that keeps
// only a shard of a parameter reads only that shard.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

namespace torch::nn {
class Module;
}

namespace lft::model {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // Rows [row_begin, row_begin + rows) of dim 0 of parameter `name` (a 1-d tensor's rows are its
  // elements), converted into `out`, which has that shape and any dtype and device.
  virtual void read_rows(const std::string& name, std::int64_t row_begin, std::int64_t rows,
                         at::Tensor out) const = 0;
  // For messages: where the weights come from.
  virtual std::string describe() const = 0;
};

// Copies every parameter of `model` whole from `source` (no autograd history).
void load_weights(torch::nn::Module& model, const WeightSource& source);

}  // namespace lft::model
