// Where a model's starting weights come from, read a box of rows at a time: a rank that keeps
// only a shard of a parameter reads only that shard.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>
#include <string>

namespace torch::nn {
class Module;
}

namespace lft::model {

struct Quantized4bit;  // quantize_4bit.h

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // Rows [row_begin, row_begin + rows) of dim 0 of parameter `name` (a 1-d tensor's rows are its
  // elements), converted into `out`, which has that shape and any dtype and device.
  virtual void read_rows(const std::string& name, std::int64_t row_begin, std::int64_t rows,
                         at::Tensor out) const = 0;
  // For messages: where the weights come from.
  virtual std::string describe() const = 0;
  // A weight the source holds already quantized to 4 bits (a folder bitsandbytes saved), else
  // nullptr. `shape`: the weight's.
  virtual std::shared_ptr<const Quantized4bit> quantized_weight(const std::string& /*name*/,
                                                                const std::vector<std::int64_t>& /*shape*/) const {
    return nullptr;
  }
};

// Copies every parameter of `model` whole from `source` (no autograd history).
void load_weights(torch::nn::Module& model, const WeightSource& source);

}  // namespace lft::model
