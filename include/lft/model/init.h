// Initial weights that depend only on (seed, parameter name): not on the rank, the parallel
// layout, the number of layers or the order in which parameters were created, so every rank can
// produce exactly its slice of the same logical model and two layouts start from identical weights.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

#include "lft/model/weight_source.h"

namespace torch::nn {
class Module;
}

namespace lft::model {

// The standard deviation of the normal init of weights (HF initializer_range default).
constexpr double kInitStd = 0.02;

// The 64-bit seed of a parameter's generator: splitmix64 mixing of `seed` with the FNV-1a hash of
// `name`.
std::uint64_t parameter_seed(const std::string& name, std::uint64_t seed);

// splitmix64 mixing of two 64-bit values (seeds of derived generators).
std::uint64_t mix_seed(std::uint64_t a, std::uint64_t b);

// The full logical tensor (CPU, float32) of the parameter `name` with global shape `shape`:
//   "*norm.weight" (RMSNorm)      norm_weight: ones, or zeros for a family whose norms scale by
//                                 (1 + weight) (ModelConfig::initial_norm_weight)
//   "*.bias", "*.lora_B.weight"   zeros (a LoRA adapter starts as no change, as PEFT's)
//   "*.lora_A.weight" [r, in]     uniform(-1/sqrt(in), 1/sqrt(in)): PEFT's kaiming_uniform(a=sqrt(5))
//                                 bound, from the generator below
//   anything else (embedding, linear weights)   normal(0, kInitStd) from a CPU generator seeded
//                                 with parameter_seed(name, seed)
at::Tensor init_parameter(const std::string& name, at::IntArrayRef shape, std::uint64_t seed,
                          double norm_weight = 1.0);

// Fills every parameter of `model` (named as in named_parameters(), recursively) with
// init_parameter(name, its shape, seed, norm_weight), converted to its dtype and device. Does not record
// autograd history.
void init_weights(torch::nn::Module& model, std::uint64_t seed, double norm_weight = 1.0);

// init_parameter() as a WeightSource for `model`'s parameters (their shapes are read now; the
// model may be unallocated): a rank that keeps a slice generates each parameter in turn and keeps
// its rows, never the whole model.
class InitWeights final : public WeightSource {
 public:
  InitWeights(torch::nn::Module& model, std::uint64_t seed, double norm_weight = 1.0);
  void read_rows(const std::string& name, std::int64_t row_begin, std::int64_t rows,
                 at::Tensor out) const override;
  std::string describe() const override { return "random init (seed " + std::to_string(seed_) + ")"; }

 private:
  std::uint64_t seed_;
  double norm_weight_;
  std::map<std::string, std::vector<std::int64_t>> shapes_;
};

}  // namespace lft::model
