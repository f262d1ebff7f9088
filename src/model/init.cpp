// Name-and-seed deterministic parameter initialisation.
#include "lft/model/init.h"
#include "lft/runtime/text.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <cmath>
#include <torch/nn/module.h>

namespace lft::model {

namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::uint64_t fnv1a64(const std::string& s) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

}  // namespace

std::uint64_t mix_seed(std::uint64_t a, std::uint64_t b) { return splitmix64(splitmix64(a) ^ b); }

std::uint64_t parameter_seed(const std::string& name, std::uint64_t seed) {
  return splitmix64(splitmix64(seed) ^ fnv1a64(name));
}

at::Tensor init_parameter(const std::string& name, at::IntArrayRef shape, std::uint64_t seed, double norm_weight) {
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  if (ends_with(name, "norm.weight")) return at::full(shape, norm_weight, f32);
  if (ends_with(name, ".bias") || ends_with(name, ".lora_B.weight")) return at::zeros(shape, f32);
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(parameter_seed(name, seed));
  if (ends_with(name, ".lora_A.weight")) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(shape[1]));
    return at::empty(shape, f32).uniform_(-bound, bound, gen);
  }
  return at::normal(0.0, kInitStd, shape, gen, f32);
}

void init_weights(torch::nn::Module& model, std::uint64_t seed, double norm_weight) {
  at::NoGradGuard no_grad;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    at::Tensor p = item.value();
    p.copy_(init_parameter(item.key(), p.sizes(), seed, norm_weight));
  }
}

InitWeights::InitWeights(torch::nn::Module& model, std::uint64_t seed, double norm_weight)
    : seed_(seed), norm_weight_(norm_weight) {
  for (const auto& item : model.named_parameters(/*recurse=*/true)) shapes_[item.key()] = item.value().sizes().vec();
}

void InitWeights::read_rows(const std::string& name, std::int64_t row_begin, std::int64_t rows,
                            at::Tensor out) const {
  at::NoGradGuard no_grad;
  const at::Tensor whole = init_parameter(name, shapes_.at(name), seed_, norm_weight_);
  out.copy_(whole.dim() == 0 ? whole : whole.narrow(0, row_begin, rows));
}

}  // namespace lft::model
